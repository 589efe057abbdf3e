"""History repair and trimming at exchange boundaries."""

from __future__ import annotations

from agent.core import history
from tests.history_check import assert_valid_history


def user(text):
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def assistant_tool(tool_id, text="calling"):
    return {"role": "assistant", "content": [
        {"type": "text", "text": text},
        {"type": "tool_use", "id": tool_id, "name": "read", "input": {"path": "a"}},
    ]}  # fmt: skip


def results(tool_id, body="x"):
    return {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": tool_id, "content": body, "is_error": False}
    ]}  # fmt: skip


def answer(text):
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def test_repair_closes_dangling_tool_use():
    fixed = history.repair([user("hi"), assistant_tool("t1")], "server restarted")
    assert_valid_history(fixed)
    assert fixed[-1]["content"][0]["is_error"] is True
    assert "server restarted" in fixed[-1]["content"][0]["content"]


def test_repair_drops_empty_messages():
    fixed = history.repair([user("hi"), {"role": "assistant", "content": []}])
    assert fixed == [user("hi")]


def test_append_user_merges_into_trailing_tool_results():
    messages = [user("hi"), assistant_tool("t1"), results("t1")]
    history.append_user_blocks(messages, [{"type": "text", "text": "next"}])
    assert len(messages) == 3 and messages[-1]["content"][-1]["text"] == "next"
    assert_valid_history(messages)
