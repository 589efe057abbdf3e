"""The provider seam: typed stream events parsed from the API's JSON (malformed ones skipped,
never guessed at), and a provider that is neither the SDK nor the demo drives the loop."""

from __future__ import annotations

from agent.core.config import Config
from agent.core.loop import AgentLoop
from agent.core.model.provider import Completion, Request
from agent.core.model.stream import BlockDelta, BlockStart, BlockStop, MessageDelta, Usage, parse
from tests.history_check import assert_valid_history


def test_parse_reads_the_apis_events_and_skips_what_it_cannot_place():
    delta = {"type": "content_block_delta", "index": 0,
             "delta": {"type": "text_delta", "text": "hi"}}  # fmt: skip
    assert parse(delta) == BlockDelta(0, "text_delta", "hi")
    assert parse({"type": "content_block_start", "index": 1, "content_block": {
        "type": "tool_use", "id": "t1", "name": "read", "input": {}}}) == BlockStart(
        1, "tool_use", id="t1", name="read")  # fmt: skip
    assert parse({"type": "content_block_stop", "index": 1}) == BlockStop(1)
    end = {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
           "usage": {"output_tokens": 3}}  # fmt: skip
    assert parse(end) == MessageDelta("end_turn", {"output_tokens": 3})
    for malformed in (
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "future_delta"}},
        {"type": "content_block_start", "index": "0", "content_block": {"type": "text"}},
        {"type": "content_block_stop"},
        {"type": "message_stop"},
        {"type": "ping"},
        ["not", "an", "event"],
    ):
        assert parse(malformed) is None


class ScriptedProvider:
    """Answers from a script of turns: each a list of the API's events (as JSON)."""

    def __init__(self, *turns):
        self.turns, self.requests = list(turns), []

    async def stream(self, request: Request):
        self.requests.append(request)
        for raw in self.turns.pop(0):
            event = parse(raw)
            if event is not None:
                yield event

    async def complete(self, request: Request) -> Completion:
        return Completion("summary", Usage(input_tokens=1, output_tokens=1))

    async def close(self) -> None:
        pass


def turn(text: str, stop: str = "end_turn", call: tuple[str, str] | None = None) -> list:
    events = [
        {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 5}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
    ]
    if call is not None:
        events += [
            {"type": "content_block_start", "index": 1,
             "content_block": {"type": "tool_use", "id": call[0], "name": call[1]}},
            {"type": "content_block_delta", "index": 1,
             "delta": {"type": "input_json_delta", "partial_json": "{}"}},
            {"type": "content_block_stop", "index": 1},
        ]  # fmt: skip
    return [*events, {"type": "message_delta", "delta": {"stop_reason": stop},
                      "usage": {"output_tokens": 2}}]  # fmt: skip


async def test_any_provider_drives_the_loop_through_a_tool_call():
    provider = ScriptedProvider(turn("Looking.", "tool_use", ("t1", "missing")), turn("Done."))
    events = []
    loop = AgentLoop(provider, [], Config(api_key="k"), events.append, system="be brief")
    result = await loop.prompt("go")
    assert result.state == "idle"
    assert [e.type for e in events if e.type != "text_delta"] == [
        "user", "status", "text", "tool_call", "usage", "status", "tool_result", "status",
        "text", "usage", "status",
    ]  # fmt: skip
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    result = next(e for e in events if e.type == "tool_result")
    assert result.isError and "unknown tool: missing" in result.result
    first, second = provider.requests
    assert first.system == "be brief" and first.messages[0]["content"][0]["text"] == "go"
    assert second.messages[-1]["content"][0]["tool_use_id"] == "t1"
    assert_valid_history(loop.messages)
