"""Conversation history helpers: keep user/assistant alternation valid (what does not fit the
context window is compacted, never trimmed: ``compaction.py``).

The API needs strict alternation and a ``tool_result`` for every ``tool_use`` in the very
next user message. After a failure, a cancel or a crash these invariants are restored here,
so the next prompt always works.
"""

from __future__ import annotations

import json
from typing import Any

Message = dict[str, Any]


def _blocks(message: Message) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


def append_user_blocks(messages: list[Message], blocks: list[dict[str, Any]]) -> None:
    """Append a user turn, merging into a trailing user message (e.g. tool results left by
    a failed run) so that roles keep alternating."""
    if messages and messages[-1]["role"] == "user":
        messages[-1] = {"role": "user", "content": _blocks(messages[-1]) + blocks}
    else:
        messages.append({"role": "user", "content": blocks})


def pending_tool_uses(messages: list[Message]) -> list[dict[str, Any]]:
    """tool_use blocks of the last assistant message that have no tool_result yet."""
    if not messages or messages[-1]["role"] != "assistant":
        return []
    return [b for b in _blocks(messages[-1]) if b.get("type") == "tool_use"]


def error_result(tool_use_id: str, message: str) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": json.dumps({"error": message}),
        "is_error": True,
    }


def repair(messages: list[Message], reason: str = "the run was interrupted") -> list[Message]:
    """Close dangling tool_use blocks and drop empty messages; returns the fixed list."""
    fixed: list[Message] = [m for m in messages if _blocks(m)]
    dangling = pending_tool_uses(fixed)
    if dangling:
        fixed.append({"role": "user", "content": [error_result(b["id"], reason) for b in dangling]})
    return fixed
