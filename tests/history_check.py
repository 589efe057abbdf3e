"""Check that a request's messages are what the Messages API accepts."""

from __future__ import annotations


def assert_valid_history(messages: list[dict]) -> None:
    assert messages, "empty messages"
    assert messages[0]["role"] == "user"
    for before, after in zip(messages, messages[1:], strict=False):
        assert before["role"] != after["role"], f"roles do not alternate: {messages}"
    for index, message in enumerate(messages):
        content = message["content"]
        assert content, f"empty message at {index}"
        if message["role"] != "assistant" or isinstance(content, str):
            continue
        uses = [b["id"] for b in content if b["type"] == "tool_use"]
        if not uses:
            continue
        assert index + 1 < len(messages), "tool_use without a following tool_result"
        follow = messages[index + 1]["content"]
        results = [b["tool_use_id"] for b in follow if b["type"] == "tool_result"]
        assert results[: len(uses)] == uses, f"tool results {results} do not answer {uses}"
        leading = [b["type"] for b in follow[: len(uses)]]
        assert leading == ["tool_result"] * len(uses), "tool results must come first"
