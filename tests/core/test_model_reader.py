"""The model reader process (agent/core/model/reader.py, remote.py): what a server gets
through it is what it got reading the answers itself, event for event and error for
error; a stream closed early closes the model's connection; a reader that dies fails its
streams with a clear error, and the next request starts another.

One reader serves the whole module (one event loop), as one serves a server process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading

import pytest
import pytest_asyncio

from agent.core.config import Config
from agent.core.errors import ModelError, classify
from agent.core.model.anthropic import AnthropicProvider
from agent.core.model.client import make_client
from agent.core.model.pipe import HEADER, Frames, frame
from agent.core.model.provider import Request
from agent.core.model.remote import ModelReader, RemoteProvider, reader_environment
from testkit.model_server import (
    PING,
    HttpError,
    ModelServer,
    Raw,
    Stream,
    encode_event,
    error_event,
    message_end,
    message_reply,
    message_start,
    text_block,
    text_reply,
    thinking_block,
    tool_reply,
)
from tests.conftest import SHARED

in_module_loop = pytest.mark.asyncio(loop_scope="module")

FAST_RETRY = {"retry-after-ms": "10"}
TOOLS = [{"name": "read", "description": "d", "input_schema": {"type": "object"}}]
REQUEST = Request("claude-haiku-4-5", 1000, [{"role": "user", "content": "hi"}], "be brief", TOOLS)


@pytest.fixture(scope="module")
def model():
    server = ModelServer().start()
    yield server
    server.stop()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def providers(model):
    reader = ModelReader()
    inline = AnthropicProvider(make_client(Config(api_key="test-key", base_url=model.url)))
    yield inline, RemoteProvider(reader, "test-key", model.url), reader
    await inline.close()
    await reader.close()


async def outcome(provider, model, *responses) -> tuple[list, tuple | None, list]:
    """The events a stream gave, the error it ended with (classified), the requests made."""
    model.reset()
    model.enqueue(*responses)
    events, error = [], None
    try:
        async for event in provider.stream(REQUEST):
            events.append(event)
    except Exception as exc:
        error = classify(exc)
    return events, error, [request["body"] for request in model.requests]


def text_of(events) -> str:
    return "".join(e.value for e in events if getattr(e, "kind", "") == "text_delta")


def body(*events) -> bytes:
    return b"".join(encode_event(*e) for e in events)


SCENARIOS = {
    "text": [text_reply("Hello there, world. " * 20)],
    "tool call": [tool_reply(("read", {"path": "a.txt"}), text="Looking.")],
    "thinking": [
        Stream(
            [
                message_start(),
                *thinking_block(0, "hmm, let me see"),
                *text_block(1, "done"),
                *message_end(),
            ]
        )
    ],  # fmt: skip
    "429 then success": [
        HttpError(429, "rate_limit_error", "Slow down", FAST_RETRY),
        text_reply("made it"),
    ],  # fmt: skip
    "529 every time": [HttpError(529, "overloaded_error", "Overloaded", FAST_RETRY)] * 3,
    "401": [HttpError(401, "authentication_error", "invalid x-api-key")],
    "error event mid-stream": [
        Stream([message_start(), *text_block(0, "partial")[:-1], error_event()])
    ],  # fmt: skip
    "error event in one chunk with text": [
        Raw(body(message_start(), *text_block(0, "before the error")[:-1], error_event()))
    ],  # fmt: skip
    "dropped connection": [text_reply("this answer will be cut off halfway", drop_after=5)],
    "no message_delta": [Raw(body(message_start(), *text_block(0, "half")))],
    "ping only": [Raw(body(PING, PING, PING))],
    "not SSE": [Raw(b"this is not an event stream\n\n")],
    # Each after two good events in the same chunk: they count, then the stream fails.
    "data not JSON": [
        Raw(
            body(message_start(), *text_block(0, "ok")[:2])
            + b"event: content_block_delta\ndata: {not json\n\n"
        )
    ],  # fmt: skip
    "data of two values": [
        Raw(
            body(message_start(), *text_block(0, "ok")[:2])
            + b"event: content_block_delta\ndata: 1,2\n\n"
        )
    ],  # fmt: skip
}


@pytest.mark.parametrize("name", SCENARIOS)
@in_module_loop
async def test_the_reader_gives_what_reading_inline_gives(providers, model, name):
    inline, remote, _ = providers
    expected = await outcome(inline, model, *SCENARIOS[name])
    assert await outcome(remote, model, *SCENARIOS[name]) == expected
    assert expected[2]  # (the scenario reached the model)


@in_module_loop
async def test_recorded_streams_come_through_the_reader_as_inline(providers, model):
    inline, remote, _ = providers
    streams = sorted((SHARED / "conformance" / "anthropic-sse").glob("*.sse"))
    if not streams:
        if os.environ.get("HARNESS_REQUIRE_SHARED") == "1":
            pytest.fail("the conformance corpus is missing")
        pytest.skip("no ../shared/conformance")
    for path in streams:
        expected = await outcome(inline, model, Raw(path.read_bytes()))
        assert await outcome(remote, model, Raw(path.read_bytes())) == expected, path.name


@in_module_loop
async def test_a_whole_answer_and_its_errors_come_through_the_reader(providers, model):
    inline, remote, _ = providers
    for responses in ([message_reply("the summary")],
                      [HttpError(400, "invalid_request_error", "prompt is too long")]):  # fmt: skip
        answers = []
        for provider in (inline, remote):
            model.reset()
            model.enqueue(*responses)
            try:
                answers.append(await provider.complete(REQUEST))
            except Exception as exc:
                answers.append(classify(exc))
        assert answers[0] == answers[1]


@in_module_loop
async def test_streams_interleave_and_each_gets_its_own(providers, model):
    _, remote, _ = providers
    model.reset()
    model.fallback = lambda body: text_reply(f"answer to {body['messages'][0]['content']}")

    async def ask(n: int) -> str:
        request = Request("claude-haiku-4-5", 100, [{"role": "user", "content": f"q{n}"}])
        text = [
            e.value async for e in remote.stream(request) if getattr(e, "kind", "") == "text_delta"
        ]
        return "".join(text)

    answers = await asyncio.gather(*(ask(n) for n in range(20)))
    assert answers == [f"answer to q{n}" for n in range(20)]
    model.fallback = None


@in_module_loop
async def test_a_stream_closed_early_closes_the_models_connection(providers):
    _, remote, reader = providers
    closed = asyncio.Event()

    async def handle(incoming: asyncio.StreamReader, outgoing: asyncio.StreamWriter):
        await incoming.readuntil(b"\r\n\r\n")  # (the body: never read, the test needs none)
        outgoing.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                       b"transfer-encoding: chunked\r\n\r\n")  # fmt: skip
        first = body(message_start(), *text_block(0, "the start of a long answer")[:2])
        outgoing.write(b"%x\r\n%s\r\n" % (len(first), first))
        await outgoing.drain()
        while await incoming.read(65536):
            pass  # until the client closes the connection
        closed.set()
        outgoing.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    provider = RemoteProvider(reader, "test-key", f"http://127.0.0.1:{port}")
    async with contextlib.aclosing(provider.stream(REQUEST)) as stream:
        async for event in stream:
            if getattr(event, "kind", "") == "text_delta":
                break  # the run was cancelled, say
    await asyncio.wait_for(closed.wait(), 10)
    assert reader.inboxes == {}
    server.close()


@in_module_loop
async def test_a_reader_that_dies_fails_its_streams_and_the_next_request_starts_another(
    providers, model
):
    _, remote, reader = providers
    model.reset()
    hold = threading.Event()
    model.enqueue(text_reply("held in the middle of the answer", hold=hold, hold_after=3))
    got = []
    with pytest.raises(ModelError) as failed:
        async for event in remote.stream(REQUEST):
            got.append(event)
            if len(got) == 2:
                os.kill(reader.transport.get_pid(), signal.SIGKILL)
    hold.set()
    stopped = "Could not reach the API: the model reader stopped."
    assert classify(failed.value) == ("connection_error", stopped)
    model.reset()
    model.enqueue(text_reply("a new reader"))
    assert text_of([e async for e in remote.stream(REQUEST)]) == "a new reader"


def test_frames_split_anywhere_come_out_whole():
    frames = [frame(1, 3, b"[1,2]"), frame(7, 4), frame(2**31, 5, b"x" * 70_000)]
    data = b"".join(frames)
    for step in (1, 2, HEADER.size, 1000, len(data)):
        decoder, out = Frames(), []
        for start in range(0, len(data), step):
            out += decoder.feed(data[start : start + step])
        assert out == [(1, 3, b"[1,2]"), (7, 4, b""), (2**31, 5, b"x" * 70_000)]
        assert decoder.buffer == bytearray()


def test_the_reader_keeps_none_of_the_servers_secrets(monkeypatch):
    for name, value in {"ANTHROPIC_API_KEY": "sk-secret", "DJANGO_SECRET_KEY": "s",
                        "DATABASE_URL": "postgres://u:pw@db/h", "HARNESS_CREDENTIALS_KEY": "k",
                        "HTTPS_PROXY": "http://proxy:3128", "no_proxy": "localhost",
                        "SSL_CERT_FILE": "/etc/ca.pem"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    kept = reader_environment()
    assert kept["PATH"] == os.environ["PATH"]
    assert {"HTTPS_PROXY", "no_proxy", "SSL_CERT_FILE"} <= kept.keys()
    assert not {"ANTHROPIC_API_KEY", "DJANGO_SECRET_KEY", "DATABASE_URL",
                "HARNESS_CREDENTIALS_KEY"} & kept.keys()  # fmt: skip
