"""The model reader: a process of its own that makes a server's model requests and reads
their streamed answers (``python -m agent.core.model.reader``; started by ``remote.py``).

Reading a stream off the socket (the HTTP client, the SSE framing) was the largest part of
a busy server's work that is not its users' own: out here it runs beside the server's one
event loop instead of on it. The requests go through the real SDK as in the server
(``anthropic.AnthropicProvider``: auth, retries with retry-after, status errors, the
connection pool); the server gets each chunk's events as they came, undecoded, and names
an error as the server itself would (``agent.core.errors.classify``).

It speaks ``pipe.py``'s frames on its standard input and output and ends when its input
does (the server went away). Its logs go to its standard error, the server's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os

from agent.core.config import Config
from agent.core.errors import classify
from agent.core.model.anthropic import AnthropicProvider
from agent.core.model.client import make_client
from agent.core.model.pipe import ANSWER, CANCEL, DONE, EVENTS, FAILED, HEADER, START, frame
from agent.core.model.provider import Request

log = logging.getLogger("agent.model_reader")


class Output(asyncio.Protocol):
    """The pipe to the server. What the streams send in one turn of the event loop goes
    out in one write: under load many streams' chunks come in together, and each write is
    a system call here and a read and a wake-up in the server. With flow control: a stream
    waits while the server has not read what it was sent (and so, through its HTTP
    connection, does the model)."""

    def __init__(self) -> None:
        self.transport: asyncio.WriteTransport | None = None
        self.paused = False
        self.waiters: list[asyncio.Future] = []
        self.pending: list[bytes] = []

    def connection_made(self, transport) -> None:
        self.transport = transport

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._wake()

    def connection_lost(self, exc) -> None:
        self.paused = False
        self._wake()

    def _wake(self) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()

    async def send(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            raise ConnectionError("the server went away")
        self.pending.append(data)
        if len(self.pending) == 1:
            asyncio.get_running_loop().call_soon(self._flush)
        if self.paused:
            waiter = asyncio.get_running_loop().create_future()
            self.waiters.append(waiter)
            await waiter

    def _flush(self) -> None:
        data, self.pending = b"".join(self.pending), []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


class Reader:
    def __init__(self, output: Output) -> None:
        self.output = output
        self.providers: dict[tuple[str, str | None], AnthropicProvider] = {}
        self.tasks: dict[int, asyncio.Task] = {}

    def provider(self, key: str, base_url: str | None) -> AnthropicProvider:
        found = self.providers.get((key, base_url))
        if found is None:
            found = AnthropicProvider(make_client(Config(api_key=key, base_url=base_url)))
            self.providers[(key, base_url)] = found
        return found

    def take(self, stream: int, kind: int, payload: bytes) -> None:
        if kind == START:
            task = asyncio.create_task(self.answer(stream, json.loads(payload)))
            self.tasks[stream] = task
            task.add_done_callback(lambda _, stream=stream: self.tasks.pop(stream, None))
        elif kind == CANCEL:
            task = self.tasks.pop(stream, None)
            if task is not None:
                task.cancel()

    async def answer(self, stream: int, spec: dict) -> None:
        try:
            provider = self.provider(spec["key"], spec["base_url"])
            request = Request(**spec["request"])
            if spec["stream"]:
                async with contextlib.aclosing(provider.batches(request)) as batches:
                    async for batch in batches:
                        await self.send_events(stream, batch)
                await self.output.send(frame(stream, DONE))
            else:
                answer = await provider.complete(request)
                whole = {"text": answer.text, "usage": answer.usage.counts(), "model": answer.model}
                await self.output.send(frame(stream, ANSWER, json.dumps(whole).encode()))
        except asyncio.CancelledError:
            raise  # the server's reader of it went away: nobody to tell
        except ConnectionError:
            pass  # the server went away
        except Exception as exc:  # (the SDK's errors, a broken stream): named, sent
            with contextlib.suppress(ConnectionError):
                await self.output.send(frame(stream, FAILED, json.dumps(classify(exc)).encode()))

    async def send_events(self, stream: int, batch: list[bytes]) -> None:
        """One frame for a chunk's events, a JSON array of them. Each is decoded here first,
        so that what is not JSON (or is several values: "1,2") fails the stream where it
        stands, as reading it inline would, rather than slip into the array."""
        for count, data in enumerate(batch):
            try:
                json.loads(data)
            except ValueError:
                if count:
                    await self.send_events(stream, batch[:count])
                raise
        await self.output.send(frame(stream, EVENTS, b"[%s]" % b",".join(batch)))

    async def close(self) -> None:
        for task in list(self.tasks.values()):
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        for provider in self.providers.values():
            with contextlib.suppress(Exception):
                await provider.close()


async def serve(input_fd: int, output_fd: int) -> None:
    loop = asyncio.get_running_loop()
    incoming = asyncio.StreamReader()
    # The pipes' transports own these files and close them.
    pipe_in = open(input_fd, "rb", buffering=0)  # noqa: SIM115
    pipe_out = open(output_fd, "wb", buffering=0)  # noqa: SIM115
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(incoming), pipe_in)
    _, output = await loop.connect_write_pipe(Output, pipe_out)
    reader = Reader(output)
    try:
        while True:
            try:
                length, stream, kind = HEADER.unpack(await incoming.readexactly(HEADER.size))
                payload = await incoming.readexactly(length)
            except asyncio.IncompleteReadError:
                return  # the server closed the pipe: it is gone or done with us
            reader.take(stream, kind, payload)
    finally:
        await reader.close()


def main() -> None:
    # The frames go out on a copy of the standard output; the standard output itself is
    # the standard error from here on, so a stray print cannot break the pipe's framing.
    output_fd = os.dup(1)
    os.dup2(2, 1)
    logging.basicConfig(level=logging.WARNING, format="model reader: %(levelname)s %(message)s")
    asyncio.run(serve(0, output_fd))


if __name__ == "__main__":
    main()
