"""History repair and trimming at exchange boundaries (seed 002)."""

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


def test_trim_keeps_everything_under_budget():
    messages = [user("a"), answer("b")]
    assert history.trim(messages, 10_000) is messages


def test_trim_cuts_only_at_exchange_boundaries():
    big = "x" * 3000
    messages = [
        user("first " + big), assistant_tool("t1"), results("t1", big), answer("done 1"),
        user("second " + big), assistant_tool("t2"), results("t2", big), answer("done 2"),
        user("third"),
    ]  # fmt: skip
    trimmed = history.trim(messages, 7000)
    assert trimmed[0]["content"][0]["text"].startswith("second")
    assert_valid_history(trimmed)
    trimmed = history.trim(messages, 100)
    assert trimmed == [user("third")]


def test_trim_shortens_a_single_oversized_exchange():
    huge = "y" * 50_000
    messages = [user("only"), assistant_tool("t1"), results("t1", huge), answer("ok"),
                user("next")]  # fmt: skip
    trimmed = history.trim(messages, 20_000)
    assert_valid_history(trimmed)
    assert trimmed[-1] == user("next")
    assert sum(len(str(m)) for m in trimmed) < 20_000
