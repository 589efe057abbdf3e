"""Request bodies capped per path, before Django stores them.

Django's ASGI handler spools a request's whole body into a temporary file before any
middleware or view runs, with no limit of its own (``DATA_UPLOAD_MAX_MEMORY_SIZE`` is only
checked when a view reads the body): one request of a few gigabytes, signed in or not,
would fill the server's disk. ``BodyLimit`` wraps the HTTP application: a body whose
``Content-Length`` passes its path's limit is refused with 413 before Django reads any of
it, and a chunked or streamed one stops being read as its running size passes it.

What Daphne holds before the application sees a request is bounded elsewhere: Daphne
(Twisted) reads a request's whole body, into memory up to 100 KB and then a temporary
file, before it starts the application, and has no option to limit its size. In front of
it, the deployment's nginx site (deploy/nginx/harness.conf) refuses a body over
``client_max_body_size`` (2 MB; 25 MB, ``HARNESS_MAX_UPLOAD_MB``, for uploads) from its
declared length, before reading it, and cuts a slow one off at ``client_body_timeout``;
Daphne is never to be reached past it (docs/DEPLOY.md). A stalled body sent straight to
Daphne is closed by Twisted's idle timeout (60 s without a byte).
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

MB = 1024 * 1024
# Raw file bodies (the API's PUT /api/files/… and the page's PUT /files/upload/…) may be
# up to HARNESS_MAX_UPLOAD_MB.
UPLOAD_PATHS = ("/api/files/", "/files/upload/")
# So may a project made from an uploaded archive (POST /api/projects, multipart).
UPLOAD_POSTS = ("/api/projects",)
# Answered in JSON, the API's error shape: what the API and the page's fetch() read.
JSON_PATHS = ("/api/", "/files/upload/")
# Room for a form's encoding around Django's own limit.
FORM_SLACK = 64 * 1024


def limit_for(scope: dict) -> int:
    """A request body's limit by path: uploads theirs, every other request Django's own."""
    method, path = scope.get("method"), scope.get("path", "")
    if (method == "PUT" and path.startswith(UPLOAD_PATHS)) or (
        method == "POST" and path in UPLOAD_POSTS
    ):
        return settings.HARNESS_MAX_UPLOAD_MB * MB
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE + FORM_SLACK


class BodyLimit:
    """ASGI middleware for the HTTP application: refuses a body over ``limit_for``."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = limit_for(scope)
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
    """413 with a reason the caller can show: JSON for the API and the page's uploads,
    text for pages."""
    message = f"The request body is over the limit of {limit:,} bytes."
    if scope.get("path", "").startswith(JSON_PATHS):
        body = json.dumps({"error": "too_large", "message": message}).encode()
        kind = b"application/json"
    else:
        body, kind = message.encode(), b"text/plain; charset=utf-8"
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})
