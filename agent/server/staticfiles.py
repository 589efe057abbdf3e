"""Static files served by the ASGI process itself: compressed, versioned, cached for a year.

Every ``{% static %}`` URL carries the file's content hash (``?v=…``), so a browser may
keep it forever (``immutable``) and a new deploy changes the URL. The files come from the
staticfiles finders (no ``collectstatic`` step for ``make run``); each is read, hashed and
gzipped once per process, then served from memory. A URL without the current hash is
served with ``no-cache`` and an ETag, so stale links revalidate instead of going wrong.
"""

from __future__ import annotations

import gzip
import hashlib
import mimetypes
import os
import posixpath
from dataclasses import dataclass
from urllib.parse import parse_qs

from django.conf import settings
from django.contrib.staticfiles import finders
from django.contrib.staticfiles.storage import StaticFilesStorage

YEAR = 365 * 24 * 3600
COMPRESSIBLE = ("text/", "application/javascript", "application/json", "image/svg+xml")
MIN_COMPRESS = 256  # smaller files gain nothing from gzip


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    gzipped: bytes | None
    content_type: str
    digest: str
    mtime: float


_files: dict[str, StaticFile] = {}


def _clean(name: str) -> str | None:
    """The normalised relative path, or None for anything that tries to leave the root."""
    path = posixpath.normpath(name.lstrip("/"))
    if path.startswith((".", "/")) or "\\" in path or "\x00" in path:
        return None
    return path


def load(name: str) -> StaticFile | None:
    path = _clean(name)
    if path is None:
        return None
    cached = _files.get(path)
    if cached is not None and not settings.DEBUG:
        return cached  # in production files do not change: no lookup, no stat per request
    found = finders.find(path)
    if not found or not os.path.isfile(found):
        return None
    mtime = os.stat(found).st_mtime
    if cached is not None and cached.mtime == mtime:
        return cached
    with open(found, "rb") as f:
        body = f.read()
    content_type = mimetypes.guess_type(path)[0] or "application/octet-stream"
    if content_type.startswith("text/") or content_type == "application/javascript":
        content_type += "; charset=utf-8"
    gzipped = None
    if content_type.startswith(COMPRESSIBLE) and len(body) >= MIN_COMPRESS:
        gzipped = gzip.compress(body, compresslevel=9, mtime=0)
    entry = StaticFile(body, gzipped, content_type, hashlib.sha256(body).hexdigest()[:16], mtime)
    _files[path] = entry
    return entry


class VersionedStaticStorage(StaticFilesStorage):
    """``{% static %}`` URLs with the content hash appended."""

    def url(self, name: str) -> str:
        url = super().url(name)
        entry = load(name)
        return f"{url}?v={entry.digest}" if entry else url


class StaticFilesApp:
    """ASGI: answers GET/HEAD under STATIC_URL, hands everything else to ``app``."""

    def __init__(self, app):
        self.app = app
        self.prefix = settings.STATIC_URL

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            return await self.app(scope, receive, send)
        status, headers, body = self.respond(scope)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD"
                    else body})  # fmt: skip

    def respond(self, scope) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        if scope["method"] not in ("GET", "HEAD"):
            return 405, [(b"allow", b"GET, HEAD"), (b"content-length", b"0")], b""
        entry = load(scope["path"][len(self.prefix) :])
        if entry is None:
            return 404, [(b"content-type", b"text/plain"), (b"content-length", b"9")], b"Not found"
        request = {k.lower(): v for k, v in scope["headers"]}
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        versioned = query.get("v") == [entry.digest]
        etag = f'"{entry.digest}"'.encode()
        headers = [
            (b"content-type", entry.content_type.encode()),
            (b"etag", etag),
            (b"cache-control",
             f"public, max-age={YEAR}, immutable".encode() if versioned else b"no-cache"),
            (b"x-content-type-options", b"nosniff"),
        ]  # fmt: skip
        if entry.gzipped is not None:
            headers.append((b"vary", b"Accept-Encoding"))
        if etag in [tag.strip() for tag in request.get(b"if-none-match", b"").split(b",")]:
            return 304, headers, b""
        body = entry.body
        if entry.gzipped is not None and b"gzip" in request.get(b"accept-encoding", b""):
            body = entry.gzipped
            headers.append((b"content-encoding", b"gzip"))
        headers.append((b"content-length", str(len(body)).encode()))
        return 200, headers, body
