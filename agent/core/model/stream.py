"""The typed events of a streamed model response, as every provider yields them.

A provider turns what its API sends into these; the accumulator (``accumulator.py``) reads
nothing else. The shapes follow the Messages API's stream (a message starts, content blocks
start, grow by deltas and stop, the message ends with its stop reason and usage), which is
the richest the loop needs. ``parse`` reads one event of that API as decoded from its JSON:
anything malformed (no index, an unknown kind) is ``None``, skipped, never guessed at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.core.events import USAGE_FIELDS


@dataclass(slots=True)
class Usage:
    """Token counts of one response (the API's cumulative figures: the last ones win)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def update(self, counts: dict[str, Any] | None) -> None:
        if not isinstance(counts, dict):
            return
        for name in USAGE_FIELDS:
            value = counts.get(name)
            if isinstance(value, int):
                setattr(self, name, value)

    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in USAGE_FIELDS}


@dataclass(frozen=True, slots=True)
class MessageStart:
    model: str | None
    usage: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class BlockStart:
    """A content block begins: ``kind`` is its type (``text``, ``tool_use``, ``thinking``,
    ``redacted_thinking``, or one the loop does not know); the other fields as it has them."""

    index: int
    kind: str
    text: str = ""  # text, or thinking
    id: str = ""
    name: str = ""
    signature: str = ""
    data: str = ""  # a redacted_thinking block's payload


@dataclass(slots=True)  # not frozen: a frozen one costs more to make, once per delta
class BlockDelta:
    """A piece of a block: ``kind`` is ``text_delta``, ``input_json_delta``,
    ``thinking_delta`` or ``signature_delta``; ``value`` its text."""

    index: int
    kind: str
    value: str


@dataclass(frozen=True, slots=True)
class BlockStop:
    index: int


@dataclass(frozen=True, slots=True)
class MessageDelta:
    stop_reason: str | None
    usage: dict[str, Any] | None


StreamEvent = MessageStart | BlockStart | BlockDelta | BlockStop | MessageDelta

# Each delta kind and the field of the API's delta that carries its text.
DELTA_FIELDS = {
    "text_delta": "text",
    "input_json_delta": "partial_json",
    "thinking_delta": "thinking",
    "signature_delta": "signature",
}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def parse(raw: Any) -> StreamEvent | None:
    """One Messages API stream event (its JSON, decoded) as a typed event, or None."""
    if not isinstance(raw, dict):
        return None
    kind = raw.get("type")
    if kind == "content_block_delta":  # by far the most frequent: first
        index, delta = raw.get("index"), raw.get("delta")
        if type(index) is not int or type(delta) is not dict:
            return None
        delta_kind = delta.get("type")
        field = DELTA_FIELDS.get(delta_kind)
        if field is None:
            return None
        value = delta.get(field)
        return BlockDelta(index, delta_kind, value if type(value) is str else "")
    if kind == "content_block_start":
        index = raw.get("index")
        if not isinstance(index, int):
            return None
        block = _dict(raw.get("content_block"))
        return BlockStart(
            index, _str(block.get("type")) or "unknown",
            text=_str(block.get("text")) or _str(block.get("thinking")),
            id=_str(block.get("id")), name=_str(block.get("name")),
            signature=_str(block.get("signature")), data=_str(block.get("data")),
        )  # fmt: skip
    if kind == "content_block_stop":
        index = raw.get("index")
        return BlockStop(index) if isinstance(index, int) else None
    if kind == "message_start":
        message = _dict(raw.get("message"))
        model = message.get("model")
        return MessageStart(model if isinstance(model, str) else None, message.get("usage"))
    if kind == "message_delta":
        stop = _dict(raw.get("delta")).get("stop_reason")
        return MessageDelta(stop if isinstance(stop, str) else None, raw.get("usage"))
    return None  # message_stop, ping and unknown event types
