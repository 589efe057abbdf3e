"""Accumulate the typed stream events of one response (``stream.py``) into content blocks.

Text joins its deltas; a tool's input joins its ``partial_json`` strings (``""`` alone means
``{}``) and is parsed at the block's stop; thinking and its signature likewise. The loop gets
the harness's events as the blocks finish and, at the end, the assistant message as the API
wants it back in the history.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agent.core.events import Event, ReasoningEvent, TextDeltaEvent, TextEvent, ToolCallEvent
from agent.core.model.stream import (
    BlockDelta,
    BlockStart,
    BlockStop,
    MessageDelta,
    MessageStart,
    StreamEvent,
    Usage,
)


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


class TurnAccumulator:
    """Feed a response's stream events in; get harness events out and the finished message."""

    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.stop_reason: str | None = None
        self.usage = Usage()
        self.model: str | None = None
        # Tools whose call came with input that is not a JSON object: not run.
        self.invalid_tool_names: list[str] = []

    def feed(self, event: StreamEvent) -> list[Event]:
        if type(event) is BlockDelta:  # by far the most frequent: first
            return self._delta(event)
        if type(event) is BlockStart:
            return self._start(event)
        if type(event) is BlockStop:
            return self._stop(event)
        if type(event) is MessageStart:
            self.model = event.model
            self.usage.update(event.usage)
        elif type(event) is MessageDelta:
            self.stop_reason = event.stop_reason or self.stop_reason
            self.usage.update(event.usage)
        return []

    def _start(self, event: BlockStart) -> list[Event]:
        block = _Block(type=event.kind)
        if block.type in ("text", "thinking") and event.text:
            block.parts.append(event.text)
        if block.type == "tool_use":
            block.id, block.name = event.id, event.name
        elif block.type == "thinking":
            block.signature = event.signature
        elif block.type == "redacted_thinking":
            block.data = event.data
        self.blocks[event.index] = block
        return []

    def _delta(self, event: BlockDelta) -> list[Event]:
        block = self.blocks.get(event.index)
        if block is None or block.done:
            return []
        kind = event.kind
        if kind == "text_delta":
            if event.value and block.type == "text":
                block.parts.append(event.value)
                return [TextDeltaEvent(content=event.value)]
        elif kind == "signature_delta":
            block.signature += event.value
        else:  # input_json_delta, thinking_delta
            block.parts.append(event.value)
        return []

    def _stop(self, event: BlockStop) -> list[Event]:
        block = self.blocks.get(event.index)
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
