"""Replay every recorded / SDK stream of ../shared/conformance/anthropic-sse through the
harness, byte for byte, over HTTP and the real SDK."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.model_server import Raw, text_reply
from tests.conftest import SHARED, shared_path
from tests.history_check import assert_valid_history

STREAMS = sorted(p.name for p in (SHARED / "conformance" / "anthropic-sse").glob("*.sse"))


def expected_from(path: Path) -> dict:
    """What the file says, parsed independently of the harness's accumulator."""
    texts: dict[int, list[str]] = {}
    kinds: dict[int, str] = {}
    tools: dict[int, list[str]] = {}
    stopped: set[int] = set()
    stop_reason = None
    for line in path.read_text().splitlines():
        if not line.startswith("data: "):
            continue
        data = json.loads(line[6:])
        if data["type"] == "content_block_start":
            kinds[data["index"]] = data["content_block"]["type"]
        elif data["type"] == "content_block_delta":
            delta = data["delta"]
            if delta["type"] == "text_delta":
                texts.setdefault(data["index"], []).append(delta["text"])
            elif delta["type"] == "input_json_delta":
                tools.setdefault(data["index"], []).append(delta["partial_json"])
        elif data["type"] == "content_block_stop":
            stopped.add(data["index"])
        elif data["type"] == "message_delta":
            stop_reason = data["delta"].get("stop_reason")
    return {
        "texts": ["".join(texts[i]) for i in sorted(texts) if "".join(texts[i])],
        "tool_calls": [
            json.loads("".join(tools[i]) or "{}")
            for i in sorted(tools) if kinds[i] == "tool_use" and i in stopped
        ],
        "stop_reason": stop_reason,
    }  # fmt: skip


def test_the_conformance_corpus_is_present():
    folder = shared_path("conformance", "anthropic-sse")
    assert len(list(folder.glob("*.sse"))) >= 10


@pytest.mark.parametrize("name", STREAMS or ["(absent)"])
async def test_conformance_stream_replays_through_the_harness(make_harness, model_server, name):
    path = shared_path("conformance", "anthropic-sse", name)
    expected = expected_from(path)
    harness, events = make_harness()
    model_server.enqueue(Raw(path.read_bytes()), text_reply("follow-up answer"))
    result = await harness.prompt("replay")

    closing = [e for e in events if e.type == "status" and e.state in ("idle", "error")]
    assert closing == [events[-1]]
    texts = [e.content for e in events if e.type == "text"]
    calls = [e.input for e in events if e.type == "tool_call"]

    if expected["stop_reason"] == "refusal":
        assert result.code == "refusal" and result.state == "idle"
        assert texts == expected["texts"] and calls == []
        assert harness.messages == []
        return
    if expected["stop_reason"] == "max_tokens":
        assert result.state == "idle" and calls == []  # the cut call is dropped, never run
        assert [e.code for e in events if e.type == "error"] == ["max_tokens"]
        assert texts == expected["texts"]
        return
    assert result.state == "idle", result
    assert texts[: len(expected["texts"])] == expected["texts"]
    assert calls == expected["tool_calls"]
    if calls:  # recorded tools are not ours: each gets an is_error result, then turn two
        results = [e for e in events if e.type == "tool_result"]
        assert results and all(r.isError for r in results)
        assert texts[-1] == "follow-up answer"
        assert_valid_history(model_server.bodies[-1]["messages"])
    usage = [e for e in events if e.type == "usage"]
    assert usage and usage[0].input_tokens > 0
