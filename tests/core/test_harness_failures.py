"""Upstream failures through the real SDK: each ends the run as events, keeps what was
produced, and leaves a history the next prompt can use."""

from __future__ import annotations

import json

from testkit.model_server import (
    PING,
    HttpError,
    Raw,
    Stream,
    encode_event,
    error_event,
    message_end,
    message_start,
    text_block,
    text_reply,
    tool_block,
    tool_reply,
)
from tests.conftest import types
from tests.history_check import assert_valid_history

FAST_RETRY = {"retry-after-ms": "10"}


def final(events):
    closing = [e for e in events if e.type == "status" and e.state in ("idle", "error")]
    assert closing == [events[-1]], "a prompt ends with exactly one idle/error status"
    return events[-1]


def errors(events):
    return [(e.code, e.message) for e in events if e.type == "error"]


async def test_429_then_success_is_retried_by_the_sdk(make_harness, model_server):
    harness, events = make_harness()
    model_server.enqueue(
        HttpError(429, "rate_limit_error", "Slow down", FAST_RETRY), text_reply("made it")
    )
    assert (await harness.prompt("hi")).state == "idle"
    assert len(model_server.requests) == 2 and errors(events) == []
    assert final(events).state == "idle"


async def test_500_then_success_is_retried(make_harness, model_server):
    harness, events = make_harness()
    model_server.enqueue(HttpError(500, "api_error", "Internal", FAST_RETRY), text_reply("ok"))
    assert (await harness.prompt("hi")).state == "idle"


async def test_529_overloaded_every_time_ends_in_a_clear_error(make_harness, model_server):
    harness, events = make_harness()
    model_server.enqueue(*[HttpError(529, "overloaded_error", "Overloaded", FAST_RETRY)] * 3)
    result = await harness.prompt("hi")
    assert result.state == "error" and len(model_server.requests) == 3  # 1 + 2 retries
    ((code, message),) = errors(events)
    assert code == "overloaded" and "529" in message and "Overloaded" in message
    assert final(events).state == "error" and final(events).message == message


async def test_401_is_not_retried_and_names_the_problem(make_harness, model_server):
    harness, events = make_harness()
    model_server.enqueue(HttpError(401, "authentication_error", "invalid x-api-key"))
    result = await harness.prompt("hi")
    assert len(model_server.requests) == 1
    assert result.code == "authentication_error" and "invalid x-api-key" in result.message


async def test_failed_prompt_leaves_history_usable(make_harness, model_server):
    harness, events = make_harness()
    model_server.enqueue(HttpError(400, "invalid_request_error", "bad"), text_reply("ok"))
    await harness.prompt("first (fails)")
    assert (await harness.prompt("second")).state == "idle"
    sent = model_server.bodies[-1]["messages"]
    assert_valid_history(sent)
    assert sent == [{"role": "user", "content": [{"type": "text", "text": "second"}]}]


async def test_mid_stream_error_event_is_not_retried_and_keeps_partial_text(
    make_harness, model_server
):
    harness, events = make_harness()
    model_server.enqueue(
        Stream([message_start(), *text_block(0, "partial answer")[:-1], error_event()]),
        text_reply("recovered"),
    )
    result = await harness.prompt("hi")
    assert result.state == "error" and len(model_server.requests) == 1
    ((code, message),) = errors(events)
    assert code == "overloaded" and "mid-stream" in message
    assert [e.content for e in events if e.type == "text"] == ["partial answer"]
    assert (await harness.prompt("again")).state == "idle"
    sent = model_server.bodies[-1]["messages"]
    assert_valid_history(sent)
    assert sent[1]["content"] == [{"type": "text", "text": "partial answer"}]


async def test_dropped_connection_mid_stream_is_an_error_not_a_clean_end(
    make_harness, model_server
):
    harness, events = make_harness()
    model_server.enqueue(text_reply("this answer will be cut off halfway", drop_after=5))
    result = await harness.prompt("hi")
    assert result.state == "error" and result.code == "stream_error"
    assert final(events).state == "error"
    assert len([e for e in events if e.type == "text"]) == 1  # the partial text is kept


async def test_stream_ending_without_message_delta_is_incomplete(make_harness, model_server):
    harness, events = make_harness()
    body = b"".join(encode_event(*e) for e in [message_start(), *text_block(0, "half")])
    model_server.enqueue(Raw(body))
    result = await harness.prompt("hi")
    assert result.code == "incomplete_stream" and final(events).state == "error"


async def test_stream_missing_only_message_stop_is_complete(make_harness, model_server):
    harness, events = make_harness()
    body = b"".join(encode_event(*e) for e in [message_start(), *text_block(0, "whole"),
                                                 *message_end()[:1]])  # fmt: skip
    model_server.enqueue(Raw(body))
    assert (await harness.prompt("hi")).state == "idle"


async def test_max_tokens_drops_a_tool_call_cut_off_mid_json(make_harness, model_server, workspace):
    harness, events = make_harness()
    cut = tool_block(1, "write", {"path": "x.txt", "content": "never"}, stop=False)[:3]
    model_server.enqueue(
        Stream([message_start(), *text_block(0, "Writing now."), *cut,
                *message_end("max_tokens")]),
        text_reply("next answer"),
    )  # fmt: skip
    result = await harness.prompt("write it")
    assert result.state == "idle"
    ((code, message),) = errors(events)
    assert code == "max_tokens" and "write" in message
    assert "tool_call" not in types(events) and not (workspace.root / "x.txt").exists()
    assert harness.messages[-1]["content"] == [{"type": "text", "text": "Writing now."}]
    await harness.prompt("continue")
    assert_valid_history(model_server.bodies[-1]["messages"])


async def test_refusal_ends_the_prompt_and_is_not_kept_in_history(make_harness, model_server):
    harness, events = make_harness()
    model_server.enqueue(
        Stream([message_start(), *text_block(0, "I can"), *message_end("refusal")]),
        text_reply("fine"),
    )
    result = await harness.prompt("something bad")
    assert result.code == "refusal" and final(events).state == "idle"
    assert [c for c, _ in errors(events)] == ["refusal"]
    assert harness.messages == []
    await harness.prompt("something good")
    assert model_server.bodies[-1]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "something good"}]}
    ]


async def test_malformed_tool_input_is_reported_and_never_run(
    make_harness, model_server, workspace
):
    harness, events = make_harness()
    model_server.enqueue(
        Stream([message_start(),
                *tool_block(0, "write", {}, raw_json='{"path": "y.txt", "content": '),
                *message_end("tool_use")]),
    )  # fmt: skip
    result = await harness.prompt("go")
    assert result.state == "idle" and not (workspace.root / "y.txt").exists()
    assert [c for c, _ in errors(events)] == ["invalid_tool_input"]


async def test_failure_after_a_tool_ran_keeps_its_result_for_the_next_prompt(
    make_harness, model_server, workspace
):
    harness, events = make_harness()
    model_server.enqueue(
        tool_reply(("write", {"path": "made.txt", "content": "side effect"})),
        HttpError(400, "invalid_request_error", "boom"),
        text_reply("I see made.txt exists"),
    )
    assert (await harness.prompt("make a file")).state == "error"
    assert (workspace.root / "made.txt").exists()  # and it is never replayed
    await harness.prompt("what happened?")
    sent = model_server.bodies[-1]["messages"]
    assert_valid_history(sent)
    last = sent[-1]["content"]
    assert last[0]["type"] == "tool_result" and last[-1] == {
        "type": "text",
        "text": "what happened?",
    }
    assert sum(1 for b in model_server.bodies if b) == 3


async def test_error_messages_never_contain_the_api_key(make_harness, model_server):
    harness, events = make_harness(api_key="sk-ant-very-secret")
    model_server.enqueue(HttpError(401, "authentication_error", "invalid x-api-key"))
    await harness.prompt("hi")
    assert "sk-ant-very-secret" not in json.dumps([e.to_dict() for e in events])


async def test_ping_only_stream_then_close_is_incomplete(make_harness, model_server):
    harness, events = make_harness()
    model_server.enqueue(Stream([message_start(), PING, PING]))
    assert (await harness.prompt("hi")).code == "incomplete_stream"


async def test_a_crashing_tool_never_shows_the_model_a_host_path(make_harness, model_server):
    """A tool bug that raises an OSError (whose text names the file) gives the model the
    error's kind and errno message, not the server's path."""

    class Crashing:
        name = "crash"
        description = "raises"
        input_schema = {"type": "object", "properties": {}}

        async def execute(self, params):
            raise FileNotFoundError(2, "No such file or directory", "/srv/harness/var/secret")

    harness, events = make_harness(tools=[Crashing()])
    model_server.enqueue(tool_reply(("crash", {})), text_reply("ok"))
    await harness.prompt("go")
    result = next(e for e in events if e.type == "tool_result")
    assert result.isError and "/srv/harness" not in result.result
    assert "FileNotFoundError" in result.result and "file not found" in result.result
