"""Read a streamed Messages API response as plain event dicts, straight off the wire.

The SDK still makes the request (auth, retries with retry-after, status errors before the
stream, the connection pool); we only read the body ourselves. Iterating the SDK's stream
builds a pydantic model of every event (``construct_type``), which the server profile at
250 sessions showed as its largest single cost per delta, and the accumulator
(``stream.parse``) needs only the dicts. The parsing follows the SSE spec as the SDK's own
decoder does: lines end in LF, CRLF or CR; comments are skipped; ``data`` lines join with
LF; an event is dispatched at a blank line, and one left unterminated at the end of the
body is dropped. ``ping`` and events without a name are skipped; an ``error`` event raises
the SDK's ``APIStatusError``, as the SDK's stream would.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import anthropic


class SSEParser:
    """Incremental: feed it the body's chunks, get back (event name, data bytes) pairs."""

    def __init__(self) -> None:
        self._partial = b""  # a line not yet ended
        self._after_cr = False  # the last chunk ended in CR: a LF first in the next is its pair
        self._event: bytes | None = None
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[tuple[str | None, bytes]]:
        if not chunk:
            return []
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._after_cr = chunk.endswith(b"\r")
        lines = (self._partial + chunk).splitlines(keepends=True)
        self._partial = lines.pop() if lines and not lines[-1].endswith((b"\n", b"\r")) else b""
        out: list[tuple[str | None, bytes]] = []
        for line in lines:
            line = line.rstrip(b"\r\n")
            if not line:
                if self._event is not None or self._data:
                    name = self._event.decode("utf-8") if self._event else None  # as the SDK
                    out.append((name, b"\n".join(self._data)))
                self._event, self._data = None, []
                continue
            if line[:1] == b":":
                continue  # a comment
            name, _, value = line.partition(b":")
            if value[:1] == b" ":
                value = value[1:]
            if name == b"event":
                self._event = value
            elif name == b"data":
                self._data.append(value)
            # id and retry mean nothing for this API; unknown fields are ignored (spec)
        return out


async def events(stream: anthropic.AsyncStream) -> AsyncIterator[Any]:
    """The events of ``client.messages.create(..., stream=True)``: dicts parsed from the
    body of the SDK's stream (its HTTP ``response``)."""
    response = stream.response
    parser = SSEParser()
    async for chunk in response.aiter_bytes():
        for name, data in parser.feed(chunk):
            if name is None or name == "ping":
                continue
            if name == "error":
                raise _stream_error(data, response)
            if data:
                yield json.loads(data)


def _stream_error(data: bytes, response: Any) -> Exception:
    """What the SDK's stream raises for an ``error`` event: mid-stream the status is 200,
    for which the SDK's class is always the base ``APIStatusError``."""
    import anthropic  # here, not at import time: the SDK takes a second to import

    text = data.decode("utf-8", "replace")
    try:
        body: Any = json.loads(text)
        message = f"{body}"
    except ValueError:
        body, message = text, text or f"Error code: {response.status_code}"
    return anthropic.APIStatusError(message, response=response, body=body)
