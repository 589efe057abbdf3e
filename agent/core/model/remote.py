"""A ``Provider`` whose requests a model reader process makes (``reader.py``).

A server's event loop is one core's worth of work for all its users' streams. Reading
each answer off its own HTTP connection (the client's layers, the SSE framing) was the
largest part of that work not spent on the users' pages; a ``ModelReader`` moves it into
a process of its own, which reads every stream of the loop and sends each chunk's events
down one pipe: many streams' events arrive in one read. The events are the API's own, and
so are the errors, named in the reader as here (``agent.core.errors.classify``).

The reader starts when first needed (or earlier: ``start``) and again after it stops; the
streams it was reading when it stopped end with a ``connection_error``. Closing a stream
early (``aclose``, a cancelled run) tells the reader to drop the request and its
connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from agent.core.errors import ModelError
from agent.core.model.pipe import ANSWER, CANCEL, DONE, EVENTS, FAILED, START, Frames, frame
from agent.core.model.provider import Completion, Request
from agent.core.model.stream import StreamEvent, Usage, parse

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[3]  # where the ``agent`` package is
REQUEST_FIELDS = tuple(f.name for f in dataclasses.fields(Request))
STOPPED = json.dumps(["connection_error", "Could not reach the API: the model reader stopped."])
KEPT_ENV = frozenset({"PATH", "HOME", "LANG", "TZ", "TMPDIR", "SSL_CERT_FILE", "SSL_CERT_DIR",
                      "ANTHROPIC_LOG"})  # fmt: skip
STOP_WAIT = 5.0  # seconds a closing reader has to end by itself before it is killed


class _Inbox:
    """The frames of one stream, as they came, for the one task reading it."""

    __slots__ = ("frames", "waiter")

    def __init__(self) -> None:
        self.frames: list[tuple[int, bytes]] = []
        self.waiter: asyncio.Future | None = None

    def put(self, kind: int, payload: bytes) -> None:
        self.frames.append((kind, payload))
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def take(self) -> list[tuple[int, bytes]]:
        """Every frame that came since the last take (at least one: waits for it)."""
        while not self.frames:
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        frames, self.frames = self.frames, []
        return frames


class _Pipe(asyncio.SubprocessProtocol):
    def __init__(self, reader: ModelReader) -> None:
        self.reader = reader
        self.frames = Frames()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        inboxes = self.reader.inboxes
        for stream, kind, payload in self.frames.feed(data):
            inbox = inboxes.get(stream)
            if inbox is not None:  # (else a stream its reader closed meanwhile)
                inbox.put(kind, payload)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:  # (after the last of its data: the process is gone, or going)
            self.reader.stopped(self)


def reader_environment() -> dict[str, str]:
    """What the reader keeps of the server's environment: how to run Python and reach the
    API (a proxy, the CA certificates), nothing else; none of the server's secrets (each
    request brings its key)."""
    return {
        name: value for name, value in os.environ.items()
        if name in KEPT_ENV or name.startswith(("LC_", "PYTHON"))
        or name.lower().endswith("_proxy")
    }  # fmt: skip


class ModelReader:
    """A reader process for the streams of one event loop."""

    def __init__(self) -> None:
        self.transport: asyncio.SubprocessTransport | None = None
        self.pipe: _Pipe | None = None
        self.starting: asyncio.Future | None = None
        self.inboxes: dict[int, _Inbox] = {}
        self.ids = itertools.count(1)

    def start(self) -> asyncio.Future:
        """Starts the process unless it runs or is starting; the future is done when it
        runs (or could not be started)."""
        if self.starting is None:
            self.starting = asyncio.ensure_future(self._start())
            self.starting.add_done_callback(self._started)
        return self.starting

    async def _start(self) -> None:
        path = os.environ.get("PYTHONPATH")
        env = {
            **reader_environment(),
            "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
        }

        def pipe() -> _Pipe:  # (known before any of its callbacks: it may stop at once)
            self.pipe = _Pipe(self)
            return self.pipe

        transport, started = await asyncio.get_running_loop().subprocess_exec(
            pipe, sys.executable, "-m", "agent.core.model.reader",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=env,
        )  # fmt: skip
        if started is self.pipe:
            self.transport = transport
        else:  # it stopped already
            transport.close()

    def _started(self, future: asyncio.Future) -> None:
        if future.cancelled() or future.exception() is not None:
            self.starting = None  # the next stream tries again
            log.warning("the model reader could not be started: %r",
                        None if future.cancelled() else future.exception())  # fmt: skip

    def stopped(self, pipe: _Pipe) -> None:
        if pipe is not self.pipe:
            return
        if self.inboxes:
            log.warning("the model reader stopped while reading %d answers", len(self.inboxes))
        transport = self.transport
        self.transport = self.pipe = self.starting = None
        for inbox in self.inboxes.values():
            inbox.put(FAILED, STOPPED.encode())
        self.inboxes.clear()
        if transport is not None:
            transport.close()  # (its pipes; the process is gone or, if not, killed)

    async def open(self, spec: dict) -> tuple[int, _Inbox]:
        """A new request (``spec``: ``RemoteProvider._spec``) and the inbox of its answer."""
        if self.transport is None:
            try:
                await asyncio.shield(self.start())
            except (OSError, RuntimeError) as exc:
                raise ModelError("connection_error",
                                 f"Could not start the model reader: {exc}") from exc  # fmt: skip
            if self.transport is None:  # it stopped as soon as it started
                raise ModelError(*json.loads(STOPPED))
        stream, inbox = next(self.ids), _Inbox()
        self.inboxes[stream] = inbox
        self._send(frame(stream, START, json.dumps(spec).encode()))
        return stream, inbox

    def close_stream(self, stream: int, cancel: bool) -> None:
        """The stream's reader is done with it; ``cancel``: before its end, so the request
        is dropped."""
        if self.inboxes.pop(stream, None) is not None and cancel:
            self._send(frame(stream, CANCEL))

    def _send(self, data: bytes) -> None:
        stdin = self.transport.get_pipe_transport(0) if self.transport is not None else None
        if stdin is not None and not stdin.is_closing():
            stdin.write(data)

    async def close(self) -> None:
        """Ends the process: its input closed, it cancels what it reads and exits."""
        transport = self.transport
        if transport is None:
            return
        stdin = transport.get_pipe_transport(0)
        if stdin is not None:
            stdin.close()
        for _ in range(int(STOP_WAIT / 0.05)):
            if transport.get_returncode() is not None:
                break
            await asyncio.sleep(0.05)
        transport.close()  # (kills it if it has not ended)


class RemoteProvider:
    """The Anthropic API for one key and endpoint, through a ``ModelReader``."""

    def __init__(self, reader: ModelReader, api_key: str, base_url: str | None) -> None:
        self.reader = reader
        self.api_key, self.base_url = api_key, base_url

    def _spec(self, request: Request, stream: bool) -> dict:
        fields = {name: getattr(request, name) for name in REQUEST_FIELDS}
        return {"key": self.api_key, "base_url": self.base_url, "stream": stream,
                "request": fields}  # fmt: skip

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        stream, inbox = await self.reader.open(self._spec(request, True))
        finished = False
        try:
            while True:
                for kind, payload in await inbox.take():
                    if kind == EVENTS:
                        for raw in json.loads(payload):
                            event = parse(raw)
                            if event is not None:
                                yield event
                    else:
                        finished = True
                        if kind == DONE:
                            return
                        raise _failure(kind, payload)
        finally:
            self.reader.close_stream(stream, cancel=not finished)

    async def complete(self, request: Request) -> Completion:
        stream, inbox = await self.reader.open(self._spec(request, False))
        finished = False
        try:
            kind, payload = (await inbox.take())[0]  # the one frame of a whole answer
            finished = True
            if kind != ANSWER:
                raise _failure(kind, payload)
            answer = json.loads(payload)
            usage = Usage()
            usage.update(answer["usage"])
            return Completion(answer["text"], usage, answer["model"])
        finally:
            self.reader.close_stream(stream, cancel=not finished)

    async def close(self) -> None:
        pass  # the reader is the loop's (and its owner closes it), not this key's


def _failure(kind: int, payload: bytes) -> ModelError:
    if kind == FAILED:
        with contextlib.suppress(ValueError, TypeError):
            code, message = json.loads(payload)
            return ModelError(str(code), str(message))
    return ModelError("stream_error", f"The model reader sent an unexpected frame ({kind}).")
