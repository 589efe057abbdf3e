"""One HTTP/1.1 exchange with a previewed server over a stream (agent/runs/previews.py):
the request written with the app's credentials and hop-by-hop headers left out, the
answer's head parsed and its body read (by length, chunks, or to the end).

The answer is hostile: a head the app could not pass on whole (too many headers, a value
folded over lines) is a ``BadAnswer``, never an error half-way through the relay; an
interim 1xx is skipped and a 101 refused (passed on, it would tell the front proxy that
the client's connection to the app is now a raw tunnel); a chunk is relayed in pieces as
it comes, however large it says it is."""

from __future__ import annotations

import asyncio
import http.client
import io
import re

HEAD_LIMIT = 65536
READ_TIMEOUT = 300.0
PIECE = 65536  # the most of a body read (and held) at once
INTERIM_LIMIT = 8  # 1xx heads skipped before the answer's own
TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # a header's name (RFC 9110)
# Never passed on: the app's credentials in, cookies out, and what is the connection's own.
HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
       "trailer", "transfer-encoding", "upgrade", "host", "content-length"}  # fmt: skip
REQUEST_DROPPED = HOP | {"cookie", "authorization", "x-csrftoken", "forwarded",
                         "x-real-ip", "true-client-ip", "x-client-ip", "remote-user",
                         "x-remote-user"}  # fmt: skip
# What a front proxy adds to each request it passes to the app, and never the previewed
# server's to see: the authenticating proxy's secret (X-Harness-Proxy-Secret, which names
# any user) and its user header, the reader's own identity tokens (oauth2-proxy's, an AWS
# load balancer's, Google IAP's, Cloudflare Access's, Azure's), the client's address.
REQUEST_DROPPED_PREFIXES = ("x-harness-", "x-forwarded-", "x-auth-request-", "x-amzn-oidc-",
                            "x-goog-iap-", "cf-access-", "cf-connecting-", "x-ms-client-",
                            "x-ms-token-")  # fmt: skip
ANSWER_DROPPED = HOP | {"set-cookie", "set-cookie2", "content-security-policy",
                        "content-security-policy-report-only", "x-frame-options",
                        "referrer-policy",
                        # Each acts on the whole origin (the app's own, or every preview's):
                        # it would sign the reader out, pin transport or move its sockets,
                        # or widen a service worker's scope.
                        "clear-site-data", "strict-transport-security", "alt-svc",
                        "service-worker-allowed", "public-key-pins",
                        "public-key-pins-report-only"}  # fmt: skip


class BadAnswer(Exception):
    pass


def request_head(method: str, target: str, port: int, headers, body_length: int,
                 dropped: frozenset[str] = frozenset()) -> bytes:  # fmt: skip
    """The request's head for the previewed server; ``dropped``: more header names (lower
    case) never passed on (the deployment's proxy user header)."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    for name, value in headers.items():
        lower = name.lower()
        if (lower in REQUEST_DROPPED or lower in dropped
                or lower.startswith(REQUEST_DROPPED_PREFIXES)):  # fmt: skip
            continue
        if "\n" not in value and "\r" not in value:
            lines.append(f"{name}: {value}")
    if body_length or method not in ("GET", "HEAD"):
        lines.append(f"Content-Length: {body_length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")


async def read_head(reader: asyncio.StreamReader) -> tuple[int, list[tuple[str, str]], dict]:
    """(status, headers to pass on, all headers by lower-case name) of the answer, past
    any interim 1xx heads."""
    for _ in range(INTERIM_LIMIT):
        status, message = await _head(reader)
        if status == 101:
            raise BadAnswer("the previewed server switched protocols on a plain request")
        if status >= 200:
            break
    else:
        raise BadAnswer("the previewed server sent only interim answers")
    every = {k.lower(): v for k, v in message.items()}
    passed = [(k, v) for k, v in message.items()
              if k.lower() not in ANSWER_DROPPED and TOKEN.fullmatch(k)]  # fmt: skip
    return status, passed, every


async def _head(reader: asyncio.StreamReader) -> tuple[int, http.client.HTTPMessage]:
    try:
        raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError) as exc:
        raise BadAnswer("the previewed server sent no complete answer") from exc
    status_line, _, rest = raw.partition(b"\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise BadAnswer("the previewed server did not answer in HTTP/1")
    status = int(parts[1])
    if not 100 <= status <= 599:
        raise BadAnswer("the previewed server's status is out of range")
    try:
        message = http.client.parse_headers(io.BytesIO(rest))
    except http.client.HTTPException as exc:  # more than 100 headers
        raise BadAnswer(f"the previewed server's headers are not valid: {exc}") from None
    if any("\r" in v or "\n" in v for v in message.values()):  # folded over lines
        raise BadAnswer("the previewed server's headers are not valid: a folded line")
    return status, message


async def body(reader: asyncio.StreamReader, every: dict, head_only: bool):
    """The answer's body, as it comes."""
    if head_only:
        return
    if "chunked" in every.get("transfer-encoding", "").lower():
        async for piece in _chunks(reader):
            yield piece
        return
    left = int(every["content-length"]) if every.get("content-length", "").isdigit() else None
    while left is None or left > 0:
        data = await asyncio.wait_for(reader.read(PIECE if left is None else min(PIECE, left)),
                                      READ_TIMEOUT)  # fmt: skip
        if not data:
            return
        if left is not None:
            left -= len(data)
        yield data


async def _chunks(reader: asyncio.StreamReader):
    while True:
        size_line = await asyncio.wait_for(reader.readline(), READ_TIMEOUT)
        try:
            size = int(size_line.split(b";")[0].strip(), 16)
        except ValueError:
            return
        if size <= 0:
            return
        while size > 0:
            data = await asyncio.wait_for(reader.read(min(PIECE, size)), READ_TIMEOUT)
            if not data:
                return
            size -= len(data)
            yield data
        await asyncio.wait_for(reader.readline(), READ_TIMEOUT)
