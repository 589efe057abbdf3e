"""Request bodies are capped before Django reads them.

Django's ASGI handler spools a request's whole body into a temporary file before any
middleware or view runs, with no limit of its own (``DATA_UPLOAD_MAX_MEMORY_SIZE`` is only
checked when a view reads the body): one request of a few gigabytes, signed in or not,
would fill the server's disk. Here a body over its path's limit is refused with 413 as
soon as its ``Content-Length`` (or, for a chunked body, its running size) passes it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

MB = 1024 * 1024


class BodyLimit:
    def __init__(self, app, limit_for: Callable[[dict], int]):
        self.app, self.limit_for = app, limit_for

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit_for(scope)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            return await _refuse(scope, send, limit)
        seen, over, started = 0, False, False

        async def limited_receive() -> dict[str, Any]:
            nonlocal seen, over
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:  # the app sees a client that went away, and answers nothing
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def tracked_send(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, limited_receive, tracked_send)
        if over and not started:
            await _refuse(scope, send, limit)


def _content_length(scope: dict) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(scope: dict, send, limit: int) -> None:
    message = f"The request body is over the limit of {limit:,} bytes."
    if scope.get("path", "").startswith(("/api/", "/files/upload/")):  # fetch()ed: JSON
        body, kind = (
            json.dumps({"error": "too_large", "message": message}).encode(),
            b"application/json",
        )
    else:
        body, kind = message.encode(), b"text/plain; charset=utf-8"
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def cap_server_bodies(limit: int) -> None:
    """Under Daphne, Twisted reads a request's whole body (into a temporary file past
    100 KB) before the application sees any of it: ``BodyLimit`` alone would run too late
    to keep a huge body off the disk. Here a body whose declared length passes ``limit``
    is answered 413 at once and the connection closed; a chunked one is cut off when it
    passes it. (The per-path limits are then ``BodyLimit``'s.)"""
    from daphne.http_protocol import WebRequest

    if getattr(WebRequest, "harness_body_cap", None) is not None:
        WebRequest.harness_body_cap = limit
        return
    got_length, content_chunk = WebRequest.gotLength, WebRequest.handleContentChunk
    WebRequest.harness_body_cap = limit

    def gotLength(self, length):  # noqa: N802 - Twisted's name
        self.harness_body_size, self.harness_refused = 0, False
        if length is not None and length > WebRequest.harness_body_cap:
            _refuse_now(self)
            return got_length(self, 0)
        return got_length(self, length)

    def handleContentChunk(self, data):  # noqa: N802 - Twisted's name
        if getattr(self, "harness_refused", False):
            return
        self.harness_body_size = getattr(self, "harness_body_size", 0) + len(data)
        if self.harness_body_size > WebRequest.harness_body_cap:
            _refuse_now(self)
            return
        content_chunk(self, data)

    WebRequest.gotLength, WebRequest.handleContentChunk = gotLength, handleContentChunk


def _refuse_now(request) -> None:
    request.harness_refused = True
    body = b"The request body is too large."
    request.channel.transport.write(
        b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: text/plain\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    )
    request.channel.transport.loseConnection()
