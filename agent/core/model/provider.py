"""The one seam between the loop and a model: ``Provider``.

A provider takes a ``Request`` (the model, the system prompt, the history, the tools) and
either streams the answer as typed events (``stream.py``) or, for a compaction's summary,
returns it whole (``Completion``). Errors are the provider's own exceptions, raised from the
iterator; ``agent.core.errors.classify`` names them for the ``error`` event. Two providers
exist: ``anthropic.AnthropicProvider`` (the real API) and ``demo.DemoProvider`` (offline).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.core.model.stream import StreamEvent, Usage


@dataclass(frozen=True, slots=True)
class Request:
    model: str
    max_tokens: int
    messages: list[dict[str, Any]]
    system: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    thinking_budget: int = 0

    def to_api(self) -> dict[str, Any]:
        """The Messages API's parameters for it (without ``stream``)."""
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": self.messages,
        }
        if self.system:
            params["system"] = self.system
        if self.tools:
            params["tools"] = self.tools
            params["tool_choice"] = {"type": "auto"}
        if self.thinking_budget:
            params["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        return params


@dataclass(frozen=True, slots=True)
class Completion:
    """A whole, non-streamed answer: its text and what it cost."""

    text: str
    usage: Usage
    model: str | None = None


class Provider(Protocol):
    def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        """The answer as it streams. Closing the iterator early (``aclose``) ends the
        response and frees its connection."""
        ...

    async def complete(self, request: Request) -> Completion: ...

    async def close(self) -> None:
        """Free the provider's connections (on the event loop that used them)."""
        ...
