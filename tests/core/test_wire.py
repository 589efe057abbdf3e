"""Reading the model's stream off the wire (agent/core/model/wire.py): the same events the SDK's own
decoder finds, however the body is cut into chunks, and the SDK's errors."""

from __future__ import annotations

import json
import random

import pytest

from agent.core.model.wire import SSEParser
from testkit.model_server import Raw, encode_event, message_end, message_start, text_block
from tests.conftest import SHARED, shared_path

STREAMS = sorted(p.name for p in (SHARED / "conformance" / "anthropic-sse").glob("*.sse"))


def parse(chunks: list[bytes]) -> list[tuple[str | None, bytes]]:
    parser = SSEParser()
    return [event for chunk in chunks for event in parser.feed(chunk)]


def cut(body: bytes, rng: random.Random) -> list[bytes]:
    chunks, at = [], 0
    while at < len(body):
        size = rng.choice([1, 2, 3, 7, 64, 500])
        chunks.append(body[at : at + size])
        at += size
    return chunks


def sdk_decoder_events(body: bytes) -> list[tuple[str | None, bytes]]:
    """The oracle: the SDK's own SSE decoder, as its stream uses it."""
    from anthropic._streaming import SSEDecoder

    return [(sse.event, sse.data.encode()) for sse in SSEDecoder().iter_bytes(iter([body]))]


def test_events_are_the_same_however_the_body_is_chunked():
    body = b"".join([
        encode_event(*message_start()),
        *(encode_event(name, data) for name, data in text_block(0, "héllo wörld, in pieces")),
        b": a comment line\n",
        b"event: ping\ndata: {\"type\": \"ping\"}\n\n",
        *(encode_event(name, data) for name, data in message_end()),
    ])  # fmt: skip
    whole = parse([body])
    assert whole == sdk_decoder_events(body)
    assert [name for name, _ in whole][:3] == [
        "message_start", "content_block_start", "content_block_delta",
    ]  # fmt: skip
    rng = random.Random(7)
    for _ in range(50):
        assert parse(cut(body, rng)) == whole


@pytest.mark.parametrize("newline", [b"\r\n", b"\r", b"\n"])
def test_every_line_ending_of_the_sse_spec_is_read(newline):
    body = newline.join([
        b"event: content_block_delta", b"data: {\"a\":", b"data: 1}", b"",
        b"event:message_stop", b"data:{}", b"", b"",
    ])  # fmt: skip
    expected = [("content_block_delta", b'{"a":\n1}'), ("message_stop", b"{}")]
    assert parse([body]) == expected == sdk_decoder_events(body)
    assert parse([bytes([b]) for b in body]) == expected  # a CRLF split across chunks too


def test_an_event_left_unterminated_at_the_end_is_dropped_as_the_sdk_does():
    body = b"event: a\ndata: 1\n\nevent: b\ndata: 2\n"
    assert parse([body]) == [("a", b"1")] == sdk_decoder_events(body)


@pytest.mark.parametrize("name", STREAMS)
def test_conformance_streams_decode_like_the_sdk(name):
    body = shared_path("conformance", "anthropic-sse", name).read_bytes()
    expected = sdk_decoder_events(body)
    assert expected, "the corpus file has events"
    assert parse(cut(body, random.Random(name))) == expected
    for event_name, data in expected:
        if data and event_name not in (None, "ping"):
            json.loads(data)  # what the harness will parse


async def test_an_error_event_with_text_data_ends_the_run_as_the_sdk_would(
    make_harness, model_server
):
    harness, events = make_harness()
    model_server.enqueue(
        Raw(encode_event(*message_start()) + b"event: error\ndata: upstream exploded\n\n")
    )
    result = await harness.prompt("hi")
    assert result.state == "error"
    ((code, message),) = [(e.code, e.message) for e in events if e.type == "error"]
    assert code == "http_200" and "mid-stream" in message and "upstream exploded" in message


async def test_a_crlf_stream_with_unknown_events_streams_its_text(make_harness, model_server):
    harness, events = make_harness()
    body = b"".join([
        encode_event(*message_start()),
        encode_event("future_event", {"type": "future_event", "x": 1}),
        *(encode_event(name, data) for name, data in text_block(0, "line endings")),
        *(encode_event(name, data) for name, data in message_end()),
    ]).replace(b"\n", b"\r\n")  # fmt: skip
    model_server.enqueue(Raw(body))
    result = await harness.prompt("hi")
    assert result.state == "idle"
    assert "".join(e.content for e in events if e.type == "text_delta") == "line endings"
    assert [e.content for e in events if e.type == "text"] == ["line endings"]


def test_empty_chunks_and_empty_event_names_are_read_as_the_sdk_reads_them():
    assert parse([b"event: a\r", b"", b"\ndata: 1\r\n\r\n"]) == [("a", b"1")]
    body = b"event:\ndata: 2\n\n"
    assert parse([body]) == [(None, b"2")] == sdk_decoder_events(body)
