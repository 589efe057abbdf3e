"""The egress proxy: an HTTP forward proxy (CONNECT for https, absolute-URI requests for
plain http) each sandbox reaches through its own Unix socket, so who is asking is the
socket, never anything the sandbox says. It runs as asyncio tasks in the process that
starts the sandboxes (the run workers), never in a web request's path.

A connection is admitted when a rule for its user admits the host and port, the user's
bytes today are under ``HARNESS_EGRESS_MB_PER_DAY``, the sandbox holds fewer than
``HARNESS_EGRESS_CONNECTIONS`` and its user, over all their conversations, fewer than
``HARNESS_EGRESS_CONNECTIONS_PER_USER``; the name is resolved here (``resolve_checked``) and only
the checked addresses are connected to (no second lookup: no DNS rebinding). A refusal
is ``403`` with a short text body naming the host and why; every connection is logged.

Each connection costs this process database work (the rules, the day's bytes, its log
row), on the one thread its synchronous calls share with every other user's runs here:
past ``PACE`` new connections a second on average (``PACE_BURST`` at once) a sandbox's
connection is refused at the door, before any of it, counted in /metrics, and written as
one log row every ``FLOOD_ROW_SECONDS`` rather than one per connection.

The credential added to a plain-http request comes from ``credential(user_id, host,
port)`` (``Basic …`` or None), given by whoever starts the proxy: this layer knows
nothing of where credentials are kept."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from asgiref.sync import sync_to_async

from agent.core.egress_rules import EgressRefused, resolve_checked
from agent.egress import http_head, ledger
from agent.egress.rules import admission, admits
from agent.server import metrics
from agent.server.token_bucket import TokenBucket

CHUNK = 64 * 1024
CONNECT_SECONDS = 30
PACE = 25.0  # new connections a second a sandbox may open, on average
PACE_BURST = 100.0
FLOOD_READ_SECONDS = 2.0  # a refused-at-the-door connection's head read for at most this
FLOOD_ROW_SECONDS = 10.0  # one log row of a sandbox's refusals at the door in this time


@dataclass(frozen=True)
class Who:
    """The sandbox a Unix socket belongs to."""

    user_id: int | None
    conversation_id: object = None


class EgressProxy:
    def __init__(self, *, resolve=socket.getaddrinfo, connections: int | None = None,
                 user_connections: int | None = None, bound_bytes: int | None = None,
                 credential: Callable[[int, str, int], str | None] | None = None,
                 ) -> None:  # fmt: skip
        self.resolve = resolve
        self.credential = credential
        self.connections = connections
        self.user_connections = user_connections
        self.bound_bytes = bound_bytes
        self._open: Counter = Counter()  # open connections per socket (a conversation's sandboxes)
        self._open_by_user: Counter = Counter()
        self._live: Counter = Counter()  # bytes per user moved and not yet in the ledger
        self._paces: defaultdict[Who, TokenBucket] = defaultdict(
            lambda: TokenBucket(PACE, PACE_BURST)
        )
        self._flood_rows: dict[Who, float] = {}  # when a sandbox's last pace row was written
        self._servers: dict[str, tuple[asyncio.Server, Who]] = {}

    async def listen(self, path: str, who: Who) -> None:
        """A Unix socket at ``path`` for one sandbox (bound into it by its starter, who
        makes it the sandbox user's alone: whoever can connect speaks as ``who``)."""
        server = await asyncio.start_unix_server(
            lambda r, w: self.handle(r, w, who), path, limit=http_head.MAX_HEAD
        )
        self._servers[path] = (server, who)

    async def close(self, path: str | None = None) -> None:
        for key in [path] if path else list(self._servers):
            server, who = self._servers.pop(key, (None, None))
            if server is not None:
                # A conversation's pace goes with its socket: this process sees an
                # unbounded number of conversations over its life.
                self._paces.pop(who, None)
                self._flood_rows.pop(who, None)
                server.close()
                await server.wait_closed()

    async def handle(self, reader, writer, who: Who) -> None:
        from django.conf import settings

        bound = self.connections or settings.HARNESS_EGRESS_CONNECTIONS
        user_bound = self.user_connections or settings.HARNESS_EGRESS_CONNECTIONS_PER_USER
        paced = self._paces[who].take()
        self._open[who] += 1
        self._open_by_user[who.user_id] += 1
        try:
            held = self._open[who] <= bound and self._open_by_user[who.user_id] <= user_bound
            if not paced:
                await self._flood(reader, writer, who, held=held)
            elif self._open[who] > bound:
                await self._refuse(writer, who, "-", 0, f"this sandbox has {bound} "
                                   "connections open, the most it may")  # fmt: skip
            elif self._open_by_user[who.user_id] > user_bound:
                await self._refuse(writer, who, "-", 0, f"this user has {user_bound} "
                                   "connections open across their conversations, the most "
                                   "they may")  # fmt: skip
            else:
                await self._serve(reader, writer, who)
        finally:
            for counts, key in ((self._open, who), (self._open_by_user, who.user_id)):
                counts[key] -= 1
                if not counts[key]:
                    del counts[key]
            with contextlib.suppress(Exception):
                writer.close()
                await writer.wait_closed()

    async def _flood(self, reader, writer, who: Who, held: bool) -> None:
        """Refused at the door: no database work but a row now and then. Its head is read
        first (briefly, and only within the connection bound) so that the client reads the
        refusal rather than a reset."""
        reason = f"this sandbox opens more than {PACE:g} connections a second"
        if held:
            with contextlib.suppress(
                OSError, ValueError, TimeoutError, asyncio.IncompleteReadError
            ):
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), FLOOD_READ_SECONDS)
        now, last = time.monotonic(), self._flood_rows.get(who)
        if last is not None and now - last < FLOOD_ROW_SECONDS:
            await _answer(writer, 403, f"egress refused: {reason}")
            metrics.EGRESS_CONNECTIONS.inc(label="refused")
            return
        self._flood_rows[who] = now
        await self._refuse(writer, who, "-", 0, f"{reason} (for a while, the others "
                           "refused so are not logged one by one)")  # fmt: skip

    async def _serve(self, reader, writer, who: Who) -> None:
        try:
            data = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            await _answer(writer, 400, "the request head is too large")
            return
        except asyncio.IncompleteReadError:
            return
        try:
            head = http_head.parse(data)
        except http_head.BadRequest as exc:
            await _answer(writer, 400, str(exc))
            return
        rules, used = await sync_to_async(admission)(who.user_id)
        if not admits(rules, head.host, head.port):
            reason = f"no egress rule admits {head.host}:{head.port}"
            await self._refuse(writer, who, head.host, head.port, reason)
            return
        if used + self._live[who.user_id] >= self._bound():
            reason = "the daily egress bound (HARNESS_EGRESS_MB_PER_DAY) is used up"
            await self._refuse(writer, who, head.host, head.port, reason)
            return
        try:
            addresses = await asyncio.to_thread(resolve_checked, head.host, head.port, rules,
                                                self.resolve)  # fmt: skip
            upstream = await _connect(addresses, head.port)
        except EgressRefused as exc:
            await self._refuse(writer, who, head.host, head.port, str(exc))
            return
        except OSError as exc:
            await _answer(writer, 502, f"{head.host}:{head.port} could not be reached ({exc})")
            await self._log(who, head, False, f"unreachable: {exc}")
            return
        await self._relay(reader, writer, upstream, who, head, used, len(data))

    async def _relay(self, reader, writer, upstream, who: Who, head, used: int, asked: int):
        up_reader, up_writer = upstream
        moved = Counter(up=asked)
        if head.connect:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            authorization = await self._authorization(who, head)
            up_writer.write(http_head.forwarded(head, authorization))

        async def pump(source, sink, key):
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while chunk := await source.read(CHUNK):
                    moved[key] += len(chunk)
                    self._live[who.user_id] += len(chunk)
                    if used + self._live[who.user_id] > self._bound():
                        moved["over"] = 1
                        return
                    sink.write(chunk)
                    await sink.drain()
                if key == "up" and sink.can_write_eof():
                    sink.write_eof()  # the client is done sending; its answer may still come

        # The connection ends when the far side does (or the bound is reached); the log
        # row is written before the client sees the end.
        up = asyncio.ensure_future(pump(reader, up_writer, "up"))
        try:
            await pump(up_reader, writer, "down")
        finally:
            up.cancel()
            await asyncio.gather(up, return_exceptions=True)
            up_writer.close()
            reason = "stopped: the daily egress bound was reached" if moved["over"] else ""
            await self._log(who, head, True, reason, moved["up"], moved["down"])
            self._live[who.user_id] -= moved["up"] + moved["down"]

    async def _authorization(self, who: Who, head) -> str | None:
        """Only over plain http: inside CONNECT the proxy sees only ciphertext and adds
        nothing."""
        if self.credential is None or who.user_id is None:
            return None
        return await sync_to_async(self.credential)(who.user_id, head.host, head.port)

    def _bound(self) -> int:
        return self.bound_bytes if self.bound_bytes is not None else ledger.bound_bytes()

    async def _refuse(self, writer, who: Who, host: str, port: int, reason: str) -> None:
        await _answer(writer, 403, f"egress refused: {host}:{port}: {reason}")
        await sync_to_async(ledger.record)(user_id=who.user_id, host=host, port=port,
                                           conversation_id=who.conversation_id,
                                           allowed=False, reason=reason)  # fmt: skip

    async def _log(self, who: Who, head, allowed: bool, reason: str, up=0, down=0) -> None:
        await sync_to_async(ledger.record)(
            user_id=who.user_id, conversation_id=who.conversation_id, host=head.host,
            port=head.port, allowed=allowed, reason=reason, up=up, down=down,
        )  # fmt: skip


async def _connect(addresses: list[str], port: int):
    """The first of the checked addresses that answers; never the name again."""
    error: OSError = OSError("no address")
    for address in addresses:
        try:
            return await asyncio.wait_for(asyncio.open_connection(address, port),
                                          CONNECT_SECONDS)  # fmt: skip
        except (OSError, TimeoutError) as exc:
            error = exc if isinstance(exc, OSError) else OSError("timed out")
    raise error


async def _answer(writer, status: int, text: str) -> None:
    reasons = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}
    body = (text + "\n").encode("utf-8", "replace")
    writer.write(f"HTTP/1.1 {status} {reasons[status]}\r\nContent-Type: text/plain; "
                 f"charset=utf-8\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                 .encode() + body)  # fmt: skip
    with contextlib.suppress(OSError):
        await writer.drain()
