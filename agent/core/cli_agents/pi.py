"""Pi's RPC mode (``pi --mode rpc``) as the core's events. Each stdout line is one JSON
event; complete messages arrive as ``message_end`` (assistant: text and tool calls, with
usage and cost; toolResult: a tool's result), and ``agent_end`` ends the prompt. Streaming
``message_update`` lines are skipped (the complete message follows). Hostile input: anything
malformed is skipped, never raised.
"""

from __future__ import annotations

from typing import Any

from agent.core.cli_agents.claude_code import MAX_FIELD, _int, _text_of, json_object
from agent.core.events import (
    Event,
    ReasoningEvent,
    StatusEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    UsageEvent,
)


class PiRpcParser:
    def __init__(self) -> None:
        self.finished = False
        self.failed: str | None = None

    def feed(self, line: str) -> list[Event]:
        event = json_object(line)
        if event is None:
            return []
        kind = event.get("type")
        if kind == "message_end" and isinstance(event.get("message"), dict):
            message = event["message"]
            if message.get("role") == "assistant":
                return self._assistant(message)
            if message.get("role") == "toolResult":
                return [
                    ToolResultEvent(id=str(message.get("toolCallId", ""))[:200],
                                    result=_text_of(message.get("content"))[:MAX_FIELD],
                                    isError=message.get("isError") is True),
                    StatusEvent(state="thinking"),
                ]  # fmt: skip
        elif kind == "agent_end":
            self.finished = True
        elif kind == "response" and event.get("success") is False:
            self.finished = True
            self.failed = str(event.get("error") or "pi refused the command")[:500]
        return []

    def _assistant(self, message: dict) -> list[Event]:
        events: list[Event] = []
        content = message.get("content") if isinstance(message.get("content"), list) else []
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str) and block["text"].strip():
                events.append(TextEvent(content=block["text"][:MAX_FIELD]))
            elif kind == "thinking" and isinstance(block.get("thinking"), str):
                events.append(ReasoningEvent(content=block["thinking"][:MAX_FIELD]))
            elif kind == "toolCall":
                arguments = block.get("arguments")
                events.append(ToolCallEvent(
                    id=str(block.get("id", ""))[:200], name=str(block.get("name", "tool"))[:200],
                    input=arguments if isinstance(arguments, dict) else {},
                ))  # fmt: skip
                events.append(StatusEvent(state="running_tool"))
        if message.get("stopReason") == "error":
            self.failed = str(message.get("errorMessage") or "the model call failed")[:500]
        usage: Any = message.get("usage")
        if isinstance(usage, dict) and (_int(usage.get("input")) or _int(usage.get("output"))):
            cost = usage.get("cost", {}).get("total") if isinstance(usage.get("cost"), dict) else 0
            events.append(UsageEvent(
                input_tokens=_int(usage.get("input")), output_tokens=_int(usage.get("output")),
                cache_read_input_tokens=_int(usage.get("cacheRead")),
                cache_creation_input_tokens=_int(usage.get("cacheWrite")),
                cost_usd=float(cost) if isinstance(cost, (int, float)) and cost >= 0 else 0.0,
            ))  # fmt: skip
        return events
