"""The benchmark's model: an asyncio server speaking the Messages API streaming wire format
at a steady pace, every text delta stamped with the wall-clock time it was written.

Each delta's text is ``"<index>:<time_ns> "``; a reader anywhere downstream (the SDK, the
product's WebSocket, the SSE API) subtracts the stamp from the time it sees the delta.
Events use the test model server's encoding (real padding quirk, chunked transfer), and
one asyncio loop paces every stream, so hundreds of streams cost little CPU here.

    python -m bench.upstream --tokens 300 --rate 50     # prints "port <n>", serves forever
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time

from testkit.model_server import encode_event, message_end, message_start

# A whole stamp: followed by its space, or by a tag where the page's markdown dropped the
# space at the end of a paragraph.
STAMP = re.compile(r"(\d+):(\d{16,20})(?=[\s<])")


def delta_chunk(index: int) -> bytes:
    event = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": f"{index}:{time.time_ns()} "},
    }
    return _chunk(encode_event("content_block_delta", event))


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _opening() -> bytes:
    start = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    return b"".join(
        _chunk(encode_event(name, payload))
        for name, payload in (message_start(), ("content_block_start", start))
    )


def _closing(tokens: int) -> bytes:
    stop = ("content_block_stop", {"type": "content_block_stop", "index": 0})
    events = [stop, *message_end(output_tokens=tokens)]
    return b"".join(_chunk(encode_event(name, payload)) for name, payload in events) + b"0\r\n\r\n"


HEADERS = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"request-id: req_bench\r\ntransfer-encoding: chunked\r\n\r\n"
)


class PacedModel:
    def __init__(self, tokens: int, rate: float):
        self.tokens, self.interval = tokens, 1.0 / rate
        self.streams = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _one_request(self, reader, writer) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length:
            await reader.readexactly(length)  # every request gets the same stream
        if not head.startswith(b"POST /v1/messages"):
            writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            return True
        await self._stream(writer, self.tokens)
        return True

    async def _stream(self, writer: asyncio.StreamWriter, tokens: int) -> None:
        self.streams += 1
        loop = asyncio.get_running_loop()
        writer.write(HEADERS + _opening())
        start = loop.time()
        for index in range(tokens):
            wait = start + index * self.interval - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(delta_chunk(index))
            if writer.transport.get_write_buffer_size() > 1 << 20:
                await writer.drain()  # a reader that stopped reading: do not hoard memory
        writer.write(_closing(tokens))
        await writer.drain()


async def serve(tokens: int, rate: float, port: int = 0) -> None:
    model = PacedModel(tokens, rate)
    server = await asyncio.start_server(model.handle, "127.0.0.1", port, backlog=1024)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Paced, stamped Messages API stream server")
    parser.add_argument("--tokens", type=int, default=300, help="text deltas per answer")
    parser.add_argument("--rate", type=float, default=50.0, help="deltas per second")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.tokens, args.rate, args.port))


if __name__ == "__main__":
    main()
