"""A local HTTP server that speaks the Anthropic Messages API streaming wire format.

Tests script it with responses in order (one per request) and read back the requests it
recorded. The real ``anthropic`` SDK talks to it over HTTP, so retries, SSE parsing and
error mapping are the SDK's own. Streams are sent with chunked transfer encoding, like the
real API, so a connection dropped mid-body is an error for the client, not a clean end.
It is also used by the e2e tests and the load script (``python -m testkit.model_server``).
"""

from __future__ import annotations

import itertools
import json
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ids = itertools.count(1)
HOLD_LIMIT = 60.0  # seconds a held stream waits at most


@dataclass
class Stream:
    """An SSE response: ``events`` are (event name, data) pairs or raw bytes."""

    events: list[tuple[str, Any] | bytes]
    delay: float = 0.0  # seconds between events
    drop_after: int | None = None  # close the connection after this many events
    pad: bool = True  # pad data JSON like the real API does
    status: int = 200
    # Once ``hold_after`` events are sent, the rest waits until ``hold`` is set: a run kept
    # mid-answer for as long as a test needs it (up to HOLD_LIMIT), without streaming all
    # the while or racing a stream's end. The server's reset() and stop() set it.
    hold: threading.Event | None = None
    hold_after: int = 5  # (a text reply: its start and its first two deltas)


@dataclass
class Raw:
    body: bytes
    status: int = 200
    content_type: str = "text/event-stream"


@dataclass
class Json:
    """A non-streamed response: the Message as one JSON body."""

    body: dict[str, Any]
    status: int = 200


def message_reply(text: str, input_tokens: int = 500, output_tokens: int = 50) -> Json:
    """A non-streamed Message holding ``text`` (a compaction's summary)."""
    return Json({
        "id": f"msg_test_{next(_ids)}", "type": "message", "role": "assistant",
        "model": "claude-haiku-4-5", "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    })  # fmt: skip


@dataclass
class HttpError:
    status: int
    error_type: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)


def _data(payload: Any, pad: bool) -> str:
    text = json.dumps(payload, separators=(",", ":"))
    if pad and isinstance(payload, dict) and payload.get("type") != "ping":
        text = text[:-1] + " " * (len(text) % 7 + 1) + "}"  # the real API's padding quirk
    elif isinstance(payload, dict) and payload.get("type") == "ping":
        text = '{"type": "ping"}'
    return text


def encode_event(name: str, payload: Any, pad: bool = True) -> bytes:
    return f"event: {name}\ndata: {_data(payload, pad)}\n\n".encode()


# -- builders for scripted responses -------------------------------------------------------
def message_start(model: str = "claude-haiku-4-5", input_tokens: int = 10) -> tuple[str, Any]:
    return ("message_start", {
        "type": "message_start",
        "message": {
            "id": f"msg_test_{next(_ids)}", "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": 1},
        },
    })  # fmt: skip


def text_block(index: int, text: str, chunk: int = 8) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = [("content_block_start", {
        "type": "content_block_start", "index": index,
        "content_block": {"type": "text", "text": ""},
    })]  # fmt: skip
    for start in range(0, len(text), chunk):
        events.append(("content_block_delta", {
            "type": "content_block_delta", "index": index,
            "delta": {"type": "text_delta", "text": text[start : start + chunk]},
        }))  # fmt: skip
    events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def tool_block(
    index: int,
    name: str,
    params: dict[str, Any],
    tool_id: str | None = None,
    *,
    stop: bool = True,
    raw_json: str | None = None,
) -> list[tuple[str, Any]]:
    tool_id = tool_id or f"toolu_test_{next(_ids)}"
    body = raw_json if raw_json is not None else json.dumps(params)
    events: list[tuple[str, Any]] = [("content_block_start", {
        "type": "content_block_start", "index": index,
        "content_block": {"type": "tool_use", "id": tool_id, "name": name, "input": {}},
    })]  # fmt: skip
    pieces = [""] + [body[i : i + 10] for i in range(0, len(body), 10)]
    for piece in pieces:
        events.append(("content_block_delta", {
            "type": "content_block_delta", "index": index,
            "delta": {"type": "input_json_delta", "partial_json": piece},
        }))  # fmt: skip
    if stop:
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def thinking_block(index: int, thinking: str, signature: str = "c2ln") -> list[tuple[str, Any]]:
    return [
        ("content_block_start", {"type": "content_block_start", "index": index,
                                 "content_block": {"type": "thinking", "thinking": "",
                                                   "signature": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": index,
                                 "delta": {"type": "thinking_delta", "thinking": thinking}}),
        ("content_block_delta", {"type": "content_block_delta", "index": index,
                                 "delta": {"type": "signature_delta", "signature": signature}}),
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]  # fmt: skip


def message_end(stop_reason: str = "end_turn", output_tokens: int = 20) -> list[tuple[str, Any]]:
    return [
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                           "usage": {"output_tokens": output_tokens}}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip


PING = ("ping", {"type": "ping"})


def text_reply(text: str, chunk: int = 8, **kw: Any) -> Stream:
    return Stream([message_start(), PING, *text_block(0, text, chunk), *message_end()], **kw)


def tool_reply(*calls: tuple[str, dict[str, Any]], text: str | None = None, **kw: Any) -> Stream:
    events: list[Any] = [message_start()]
    index = 0
    if text:
        events += text_block(0, text)
        index = 1
    for offset, (name, params) in enumerate(calls):
        events += tool_block(index + offset, name, params)
    return Stream([*events, *message_end("tool_use")], **kw)


def error_event(error_type: str = "overloaded_error", message: str = "Overloaded") -> tuple:
    return ("error", {"type": "error", "error": {"type": error_type, "message": message}})


# -- the server ------------------------------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = None
        self.server.owner._record(self.command, self.path, dict(self.headers), body)
        response = self.server.owner._next_response(body)
        if isinstance(response, HttpError):
            self._send_error(response)
        elif isinstance(response, Raw):
            self._send_raw(response)
        elif isinstance(response, Json):
            payload = json.dumps(response.body).encode()
            self.send_response(response.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.send_header("request-id", f"req_test_{next(_ids)}")
            self.end_headers()
            self.wfile.write(payload)
        else:
            self._send_stream(response)

    def _send_error(self, err: HttpError) -> None:
        payload = json.dumps(
            {"type": "error", "error": {"type": err.error_type, "message": err.message}}
        ).encode()
        self.send_response(err.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.send_header("request-id", f"req_test_{next(_ids)}")
        for name, value in err.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _start_stream(self, status: int) -> None:
        self.send_response(status)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", f"req_test_{next(_ids)}")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _send_raw(self, raw: Raw) -> None:
        self._start_stream(raw.status)
        self._chunk(raw.body)
        self.wfile.write(b"0\r\n\r\n")

    def _send_stream(self, stream: Stream) -> None:
        self._start_stream(stream.status)
        try:
            for count, item in enumerate(stream.events):
                if stream.drop_after is not None and count >= stream.drop_after:
                    # Drop mid-body: no terminating chunk, the socket just closes.
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if self.server.owner._stopping.is_set():
                    return
                if stream.hold is not None and count == stream.hold_after:
                    stream.hold.wait(HOLD_LIMIT)  # (bounded: a test that never sets it ends)
                data = item if isinstance(item, bytes) else encode_event(*item, pad=stream.pad)
                self._chunk(data)
                if stream.delay:
                    time.sleep(stream.delay)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (e.g. a cancelled run)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: ModelServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
            return  # a client that went away (a killed server, a cancelled run)
        super().handle_error(request, client_address)


class ModelServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self._httpd = _Server((host, port), _Handler)
        self._httpd.owner = self
        self._queue: deque[Any] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.requests: list[dict[str, Any]] = []
        self._holds: list[threading.Event] = []
        self.fallback: Any = None  # a callable(body) -> response, used when the queue is empty
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> ModelServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._release_holds()
        self._httpd.shutdown()
        self._httpd.server_close()

    def reset(self) -> None:
        """Forget scripted responses and recorded requests (a server shared by tests), and
        let every held stream go on."""
        with self._lock:
            self._queue.clear()
            self.requests.clear()
        self._release_holds()

    def enqueue(self, *responses: Any) -> None:
        with self._lock:
            self._queue.extend(responses)
            self._holds.extend(r.hold for r in responses if getattr(r, "hold", None))

    def _release_holds(self) -> None:
        with self._lock:
            holds, self._holds = self._holds, []
        for hold in holds:
            hold.set()

    def _record(self, method: str, path: str, headers: dict[str, str], body: Any) -> None:
        with self._lock:
            self.requests.append({"method": method, "path": path, "headers": headers, "body": body})

    def _next_response(self, body: Any) -> Any:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self.fallback is not None:
            return self.fallback(body)
        return HttpError(500, "api_error", "the test model server has no scripted response left")

    @property
    def bodies(self) -> list[Any]:
        return [r["body"] for r in self.requests]


def echo_fallback(body: Any) -> Stream:
    """Answer any request with a short markdown echo of the last user text."""
    text = "…"
    for message in reversed((body or {}).get("messages", [])):
        if message["role"] == "user":
            content = message["content"]
            if isinstance(content, str):
                text = content
                break
            texts = [b.get("text", "") for b in content if b.get("type") == "text"]
            if texts:
                text = texts[-1]
                break
    return text_reply(f"**Echo:** {text}", delay=0.005)


if __name__ == "__main__":  # a standalone server for manual runs: echoes every prompt
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    server = ModelServer(port=args.port)
    server.fallback = echo_fallback
    print(f"test model server on {server.url}", flush=True)
    server._httpd.serve_forever()
