"""Accumulate the raw events of one streamed Messages API response into content blocks.

We read ``messages.create(..., stream=True)`` directly rather than the SDK's ``stream()``
helper: the helper costs about five times the CPU per delta (shared/notes), which caps how
many sessions a process can serve. So the accumulation is ours: text joins its deltas; a
tool's input joins its ``partial_json`` strings (``""`` alone means ``{}``) and is parsed at
``content_block_stop``; thinking and its signature likewise. Events may be SDK models or
plain dicts (unknown types); both are read through ``_get``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agent.core.events import (
    USAGE_FIELDS,
    Event,
    ReasoningEvent,
    TextDeltaEvent,
    TextEvent,
    ToolCallEvent,
)


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


@dataclass(slots=True)
class _Block:
    type: str
    parts: list[str] = field(default_factory=list)
    id: str = ""
    name: str = ""
    signature: str = ""
    data: str = ""  # redacted_thinking payload
    done: bool = False
    api_block: dict[str, Any] | None = None  # the finished block as the API wants it back


@dataclass(slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def update(self, usage: Any) -> None:
        if usage is None:
            return
        for name in USAGE_FIELDS:
            value = _get(usage, name)
            if isinstance(value, int):  # message_delta counts are cumulative
                setattr(self, name, value)


class TurnAccumulator:
    """Feed raw stream events in; get harness events out and the finished message."""

    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.stop_reason: str | None = None
        self.usage = Usage()
        self.model: str | None = None
        # Tools whose call came with input that is not a JSON object: not run.
        self.invalid_tool_names: list[str] = []

    def feed(self, event: Any) -> list[Event]:
        kind = _get(event, "type")
        if kind == "content_block_delta":  # by far the most frequent: first
            return self._delta(event)
        if kind == "content_block_start":
            return self._start(event)
        if kind == "content_block_stop":
            return self._stop(event)
        if kind == "message_start":
            message = _get(event, "message")
            self.model = _get(message, "model")
            self.usage.update(_get(message, "usage"))
        elif kind == "message_delta":
            delta = _get(event, "delta")
            self.stop_reason = _get(delta, "stop_reason") or self.stop_reason
            self.usage.update(_get(event, "usage"))
        # message_stop, ping and unknown event types are tolerated and ignored
        return []

    def _start(self, event: Any) -> list[Event]:
        index = _get(event, "index")
        if not isinstance(index, int):
            return []  # an event without an index cannot be placed: skip, never guess
        cb = _get(event, "content_block")
        block = _Block(type=_get(cb, "type") or "unknown")
        if block.type == "text" and _get(cb, "text"):
            block.parts.append(_get(cb, "text"))
        elif block.type == "tool_use":
            block.id, block.name = _get(cb, "id") or "", _get(cb, "name") or ""
        elif block.type == "thinking":
            if _get(cb, "thinking"):
                block.parts.append(_get(cb, "thinking"))
            block.signature = _get(cb, "signature") or ""
        elif block.type == "redacted_thinking":
            block.data = _get(cb, "data") or ""
        self.blocks[index] = block
        return []

    def _delta(self, event: Any) -> list[Event]:
        block = self.blocks.get(_get(event, "index"))
        if block is None or block.done:
            return []
        delta = _get(event, "delta")
        kind = _get(delta, "type")
        if kind == "text_delta":
            text = _get(delta, "text") or ""
            if text and block.type == "text":
                block.parts.append(text)
                return [TextDeltaEvent(content=text)]
        elif kind == "input_json_delta":
            block.parts.append(_get(delta, "partial_json") or "")
        elif kind == "thinking_delta":
            block.parts.append(_get(delta, "thinking") or "")
        elif kind == "signature_delta":
            block.signature += _get(delta, "signature") or ""
        return []

    def _stop(self, event: Any) -> list[Event]:
        block = self.blocks.get(_get(event, "index"))
        if block is None or block.done:
            return []
        block.done = True
        if block.type == "text":
            text = "".join(block.parts)
            if text:
                block.api_block = {"type": "text", "text": text}
                return [TextEvent(content=text)]
        elif block.type == "tool_use":
            raw = "".join(block.parts)
            try:
                params = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError:
                params = None
            if not isinstance(params, dict):
                self.invalid_tool_names.append(block.name)
                return []
            block.api_block = {
                "type": "tool_use", "id": block.id, "name": block.name, "input": params,
            }  # fmt: skip
            return [ToolCallEvent(id=block.id, name=block.name, input=params)]
        elif block.type == "thinking":
            thinking = "".join(block.parts)
            block.api_block = {
                "type": "thinking", "thinking": thinking, "signature": block.signature,
            }  # fmt: skip
            if thinking:
                return [ReasoningEvent(content=thinking)]
        elif block.type == "redacted_thinking":
            block.api_block = {"type": "redacted_thinking", "data": block.data}
        # Unknown block types (server tools, future kinds) are shown nowhere and not sent back.
        return []

    def content(self) -> list[dict[str, Any]]:
        """The finished blocks, in index order, as the API wants them in the history."""
        return [b.api_block for _, b in sorted(self.blocks.items()) if b.api_block]

    def tool_uses(self) -> list[dict[str, Any]]:
        return [b for b in self.content() if b["type"] == "tool_use"]

    def unfinished_text(self) -> str:
        """Text of blocks still streaming (kept when a run is cancelled or fails)."""
        return "".join(
            "".join(b.parts) for _, b in sorted(self.blocks.items())
            if b.type == "text" and not b.done
        )  # fmt: skip

    def unfinished_tool_names(self) -> list[str]:
        return [
            b.name for _, b in sorted(self.blocks.items()) if b.type == "tool_use" and not b.done
        ]
