"""Claude Code's stream-json output (``-p --output-format stream-json --verbose``) as the
core's events. Each line is one JSON message: ``system`` (init), ``assistant`` (one content
block each: text, tool_use, thinking), ``user`` (tool results), ``result`` (the turn's end,
with its usage and cost). Hostile input: anything malformed is skipped, never raised.
"""

from __future__ import annotations

import json
from typing import Any

from agent.core.events import (
    ApprovalEvent,
    Event,
    ReasoningEvent,
    StatusEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    UsageEvent,
)

MAX_FIELD = 200_000  # characters kept of one text or result


def _text_of(content: Any) -> str:
    """A tool result's content: a string, or a list of blocks (their texts joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
        ]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def json_object(line: str) -> dict | None:
    """One line of a CLI's structured output as a JSON object; None for anything else (the
    pane's other output: a warning on stderr, a progress line)."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class ClaudeStreamParser:
    def __init__(self) -> None:
        self.finished = False
        self.failed: str | None = None
        self.session_id: str | None = None
        # Permission requests waiting for the user: tool call id → (request id, input).
        self.pending: dict[str, tuple[str, dict]] = {}

    def feed(self, line: str) -> list[Event]:
        message = json_object(line)
        if message is None:
            return []
        kind = message.get("type")
        if isinstance(message.get("session_id"), str):
            self.session_id = message["session_id"]
        if kind == "assistant":
            return self._assistant(message.get("message"))
        if kind == "user":
            return self._tool_results(message.get("message"))
        if kind == "result":
            return self._result(message)
        if kind == "control_request":
            return self._permission(message)
        return []

    def _permission(self, message: dict) -> list[Event]:
        """``can_use_tool``: the CLI asks before a call (``--permission-prompt-tool stdio``);
        the approval card carries the tool call's id, so it sits with its tool card."""
        request = message.get("request")
        if not isinstance(request, dict) or request.get("subtype") != "can_use_tool":
            return []
        request_id = str(message.get("request_id", ""))[:200]
        call_input = request.get("input") if isinstance(request.get("input"), dict) else {}
        call_id = str(request.get("tool_use_id") or request_id)[:200]
        name = str(request.get("tool_name", "tool"))[:200]
        self.pending[call_id] = (request_id, call_input)
        return [
            ApprovalEvent(id=call_id, name=name, input=call_input),
            StatusEvent(state="waiting_input", message=f"Waiting for approval: {name}"),
        ]

    def _assistant(self, body: Any) -> list[Event]:
        if not isinstance(body, dict) or not isinstance(body.get("content"), list):
            return []
        events: list[Event] = []
        for block in body["content"]:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                if block["text"].strip():
                    events.append(TextEvent(content=block["text"][:MAX_FIELD]))
            elif block.get("type") == "thinking" and isinstance(block.get("thinking"), str):
                if block["thinking"].strip():
                    events.append(ReasoningEvent(content=block["thinking"][:MAX_FIELD]))
            elif block.get("type") == "tool_use":
                call_input = block.get("input")
                events.append(ToolCallEvent(
                    id=str(block.get("id", ""))[:200], name=str(block.get("name", "tool"))[:200],
                    input=call_input if isinstance(call_input, dict) else {},
                ))  # fmt: skip
                events.append(StatusEvent(state="running_tool"))
        return events

    def _tool_results(self, body: Any) -> list[Event]:
        if not isinstance(body, dict) or not isinstance(body.get("content"), list):
            return []
        events: list[Event] = []
        for block in body["content"]:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                events.append(ToolResultEvent(
                    id=str(block.get("tool_use_id", ""))[:200],
                    result=_text_of(block.get("content"))[:MAX_FIELD],
                    isError=block.get("is_error") is True,
                ))  # fmt: skip
        if events:
            events.append(StatusEvent(state="thinking"))
        return events

    def _result(self, message: dict) -> list[Event]:
        self.finished = True
        if message.get("is_error") is True or message.get("subtype") != "success":
            detail = message.get("result") or message.get("subtype") or "the CLI reported an error"
            self.failed = str(detail)[:500]
        usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
        cost = message.get("total_cost_usd")
        cost = float(cost) if isinstance(cost, (int, float)) and cost >= 0 else 0.0
        counts = {name: _int(usage.get(name)) for name in (
            "input_tokens", "output_tokens", "cache_read_input_tokens",
            "cache_creation_input_tokens")}  # fmt: skip
        if not any(counts.values()):
            return []
        return [UsageEvent(**counts, cost_usd=cost)]
