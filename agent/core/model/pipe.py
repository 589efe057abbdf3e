"""The pipe between a server and its model reader (``reader.py``, ``remote.py``): frames,
each a header (the payload's length, a stream's id, a kind) and a payload.

To the reader: ``START`` (the request as JSON: ``remote.RemoteProvider``), ``CANCEL`` (the
stream's reader went away). From it: ``EVENTS`` (the events of one chunk of the answer's
body, a JSON array of the API's own event objects), then ``DONE``; or ``ANSWER`` (a whole,
non-streamed answer) or ``FAILED`` (``[code, message]``: ``agent.core.errors.classify``).
"""

from __future__ import annotations

import struct

HEADER = struct.Struct(">IIB")
START, CANCEL = 1, 2
EVENTS, DONE, ANSWER, FAILED = 3, 4, 5, 6


def frame(stream: int, kind: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), stream, kind) + payload


class Frames:
    """Incremental: feed it what the pipe gave, get back the whole frames it completes as
    (stream, kind, payload)."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        buffer = self.buffer
        buffer += data
        out, start, end, size = [], 0, len(buffer), HEADER.size
        while end - start >= size:
            length, stream, kind = HEADER.unpack_from(buffer, start)
            if end - start - size < length:
                break
            out.append((stream, kind, bytes(buffer[start + size : start + size + length])))
            start += size + length
        del buffer[:start]
        return out
