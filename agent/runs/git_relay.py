"""The git relay: how sandboxed git reaches a project's remote without ever holding the
credential (docs/SECURITY.md, "Git credentials and the relay").

One relay per git operation: a private Unix socket served here (aiohttp), handed to the
broker as a descriptor and bound into the owner's sandbox, where ``git_forwarder.py``
listens on the sandbox's loopback; git's remote is ``http://127.0.0.1:PORT/git``. The
relay answers git's smart-HTTP requests only (the ref advertisement and the pack
exchange of upload-pack, and of receive-pack when the operation is a push), forwards each
to the project's remote URL with ``Authorization: Basic`` from the owner's credential for
that host (when they have one), and streams both ways within the operation's time and
byte bounds. The remote's addresses are resolved here and checked against the owner's
egress rules (agent/egress/rules.py: the deployment's and the admin's for everyone and
for that user; a public address needs none) and only those are connected to; redirects
are not followed. The token is scrubbed from every answer that goes back into the
sandbox, and from what git says (``scrub``), in case a remote echoes it.

Like the egress proxy's connections, each operation is held to the owner's daily byte
bound (refused when the day is spent, cut when it runs out midway) and ends as one row of
the Egress log, its bytes charged to the owner's day (agent/egress/ledger.py).
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import aiohttp
from aiohttp import abc, web
from asgiref.sync import sync_to_async
from django.conf import settings

from agent.core.egress_rules import EgressRefused, resolve_checked
from agent.egress import ledger
from agent.egress.rules import admission
from agent.runs.git_credentials import Credential, host_of_url
from agent.runs.workspaces import sandbox_ids
from agent.sandbox import drop

PREFIX = "/git"
SERVICES = {"git-upload-pack": False, "git-receive-pack": True}  # name: a push's only
REQUEST_HEADERS = ("content-type", "accept", "content-encoding", "git-protocol")
RESPONSE_HEADERS = ("content-type", "cache-control", "expires", "pragma")


class _CheckedResolver(abc.AbstractResolver):
    """Answers aiohttp with the addresses already checked for this one host, never a
    second lookup (a name cannot answer differently between the check and the connect)."""

    def __init__(self, host: str, addresses: list[str]):
        self.host, self.addresses = host, addresses

    async def resolve(self, host: str, port: int = 0, family=0):
        if host.lower().strip("[]") != self.host:
            raise OSError(f"{host} is not the remote this relay serves")
        return [{"hostname": host, "host": address, "port": port, "flags": 0, "proto": 0,
                 "family": socket.AF_INET6 if ":" in address else socket.AF_INET}
                for address in self.addresses]  # fmt: skip

    async def close(self) -> None:
        pass


class Scrubber:
    """Removes the secrets from a stream of chunks (a secret split across two chunks
    too: the last bytes of each chunk wait for the next)."""

    def __init__(self, secrets: list[bytes]):
        self.secrets = [s for s in secrets if s]
        self.keep = max((len(s) for s in self.secrets), default=1) - 1
        self.pending = b""

    def feed(self, chunk: bytes) -> bytes:
        if not self.secrets:
            return chunk
        data = self._clean(self.pending + chunk)
        cut = max(len(data) - self.keep, 0)
        self.pending = data[cut:]
        return data[:cut]

    def end(self) -> bytes:
        data, self.pending = self._clean(self.pending), b""
        return data

    def _clean(self, data: bytes) -> bytes:
        for secret in self.secrets:
            data = data.replace(secret, b"[credential]")
        return data


class GitRelay:
    def __init__(self, owner_id: int, remote_url: str, credential: Credential | None,
                 push: bool = False, conversation_id=None):  # fmt: skip
        self.owner_id, self.remote = owner_id, remote_url.rstrip("/")
        self.credential, self.push = credential, push
        self.conversation_id = conversation_id  # a push's conversation, for the log row
        self.limit = settings.HARNESS_GIT_MAX_MB * 1024 * 1024
        self.problem: str | None = None  # what the relay refused or cut, for the user
        self.host, self.port = "", 0
        self.moved = {"up": 0, "down": 0}  # bytes git sent, bytes the remote answered
        self._day_left = 0  # the owner's bytes left today when the operation began
        self._verdict: tuple[bool, str] | None = None  # for the log row, once checked
        self._directory = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        secrets = []
        if credential is not None:
            basic = f"{credential.username}:{credential.token}".encode()
            self._authorization = "Basic " + base64.b64encode(basic).decode()
            secrets = [credential.token.encode(), base64.b64encode(basic)]
        else:
            self._authorization = None
        self._secrets = secrets

    @property
    def socket_path(self) -> str:
        return os.path.join(self._directory, "s")

    async def __aenter__(self) -> GitRelay:
        await self.open()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def open(self) -> None:
        try:
            await self._open()
        except BaseException as exc:
            if not isinstance(exc, EgressRefused):  # admitted, then failed: the row says so
                self.problem = self.problem or f"the relay did not start: {exc!r}"[:300]
            await self.close()
            raise

    async def _open(self) -> None:
        parts = urlsplit(self.remote)
        self.host = (parts.hostname or "").lower()
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            addresses = await self._admitted()
        except EgressRefused as exc:
            self._verdict = (False, str(exc))
            raise
        self._verdict = (True, "")
        connector = aiohttp.TCPConnector(resolver=_CheckedResolver(self.host, addresses),
                                         use_dns_cache=False, limit=8)  # fmt: skip
        timeout = aiohttp.ClientTimeout(total=settings.HARNESS_GIT_TIMEOUT, sock_connect=30)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout,
                                              auto_decompress=False)  # fmt: skip
        self._directory = tempfile.mkdtemp(prefix="harness-git-")
        app = web.Application(client_max_size=self.limit)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.UnixSite(self._runner, self.socket_path).start()
        ids = sandbox_ids(self.owner_id)
        if ids is not None:  # a root server's sandbox user connects to it; nobody else
            os.chown(self._directory, *ids)
            os.chown(self.socket_path, *ids)
            os.chmod(self.socket_path, 0o600)
        else:  # under a broker it goes in by descriptor; its directory stays closed
            os.chmod(self.socket_path, 0o666 if drop.broker() is not None else 0o600)

    async def _admitted(self) -> list[str]:
        """The remote's checked addresses when the owner may reach it now: their day's
        bytes not spent, every address public or named by one of their rules (the DB is
        read off the event loop, as the egress proxy does); else ``EgressRefused``."""
        rules, used = await sync_to_async(admission)(self.owner_id)
        if used >= ledger.bound_bytes():
            raise EgressRefused(f"{self.host}:{self.port} was not reached: {_day_spent()}")
        self._day_left = ledger.bound_bytes() - used
        # (a name's lookup may take long: not on the thread the database calls share)
        return await asyncio.to_thread(resolve_checked, self.host, self.port, rules)

    async def close(self) -> None:
        try:
            if self._runner is not None:
                await self._runner.cleanup()
                self._runner = None
            if self._session is not None:
                await self._session.close()
                self._session = None
            if self._directory:  # (a root server gave it to the user's uid: off the loop)
                await asyncio.to_thread(shutil.rmtree, self._directory, True)
        finally:
            await self._log()

    async def _log(self) -> None:
        """The operation's one Egress log row, written once it ends (or is refused), its
        bytes charged to the owner's day and counted in /metrics."""
        if self._verdict is None:  # it failed before the check (a bad URL, the database)
            return
        (allowed, refusal), self._verdict = self._verdict, None
        await sync_to_async(ledger.record)(
            user_id=self.owner_id, conversation_id=self.conversation_id, host=self.host,
            port=self.port, allowed=allowed, reason=refusal or self.problem or "",
            up=self.moved["up"], down=self.moved["down"],
        )  # fmt: skip

    def scrub(self, text: str) -> str:
        """What git said, fit to show: the relay's address is the remote's, no secret."""
        from agent.sandbox.git_spawn import RELAY_URLS

        text = RELAY_URLS.sub(lambda _: self.remote, text)
        for secret in self._secrets:
            text = text.replace(secret.decode(), "[credential]")
        return text

    def _allowed(self, request: web.Request) -> str | None:
        """The remote's path for a smart-HTTP request of this operation, else None."""
        path = request.path
        if not path.startswith(PREFIX + "/"):
            return None
        tail = path[len(PREFIX) :]
        if request.method == "GET" and tail == "/info/refs":
            service = request.query.get("service")
            if len(request.query) == 1 and self._serves(service):
                return f"{tail}?service={service}"
            return None
        if request.method == "POST" and self._serves(tail.removeprefix("/")):
            return tail
        return None

    def _serves(self, service) -> bool:
        return service in SERVICES and (self.push or not SERVICES[service])

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        target = self._allowed(request)
        if target is None:
            return _text(404, "The git relay serves this operation's smart-HTTP requests only.")
        headers = {n: request.headers[n] for n in REQUEST_HEADERS if n in request.headers}
        headers["accept-encoding"] = "identity"  # scrubbed as it passes: not compressed
        headers["user-agent"] = request.headers.get("user-agent", "git/harness")[:200]
        if self._authorization:
            headers["authorization"] = self._authorization
        body = self._bounded(request.content) if request.method == "POST" else None
        assert self._session is not None
        try:
            upstream = await self._session.request(request.method, self.remote + target,
                                                   headers=headers, data=body,
                                                   allow_redirects=False)  # fmt: skip
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return self._refuse(502, f"the remote is unreachable: {self.scrub(str(exc))}")
        async with upstream:
            return await self._answer(request, upstream)

    async def _answer(self, request, upstream) -> web.StreamResponse:
        host = host_of_url(self.remote)
        if upstream.status in (401, 403):
            if self._authorization is None:
                return self._refuse(
                    403,
                    f"{host} asks for a credential: add yours with "
                    f"PUT /api/credentials/git/{host} (HTTP {upstream.status})",
                )
            return self._refuse(
                403,
                f"{host} refused the credential of "
                f"{self.credential.username!r} (HTTP {upstream.status})",
            )
        if 300 <= upstream.status < 400:
            where = upstream.headers.get("location", "")[:300]
            return self._refuse(502, f"the remote redirects to {self.scrub(where)!r}: use that "
                                "URL for the project")  # fmt: skip
        headers = {n: upstream.headers[n] for n in RESPONSE_HEADERS if n in upstream.headers}
        response = web.StreamResponse(status=upstream.status, headers=headers)
        await response.prepare(request)
        scrubber = Scrubber(self._secrets)
        received = 0
        try:
            async for chunk in upstream.content.iter_any():
                received += len(chunk)
                cut = self._count("down", len(chunk))
                if received > self.limit:
                    cut = (f"the remote sent more than {settings.HARNESS_GIT_MAX_MB}"
                           " MB; stopped (HARNESS_GIT_MAX_MB)")  # fmt: skip
                if cut:
                    self.problem = cut
                    request.transport.close()  # git sees the answer cut off
                    return response
                await response.write(scrubber.feed(chunk))
            await response.write(scrubber.end())
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.problem = self.problem or f"the remote's answer broke off: {self.scrub(str(exc))}"
            request.transport.close()
            return response
        await response.write_eof()
        return response

    async def _bounded(self, content) -> AsyncIterator[bytes]:
        sent = 0
        async for chunk in content.iter_any():
            sent += len(chunk)
            cut = self._count("up", len(chunk))
            if sent > self.limit:
                cut = (f"git sent more than {settings.HARNESS_GIT_MAX_MB} MB; "
                       "stopped (HARNESS_GIT_MAX_MB)")  # fmt: skip
            if cut:
                self.problem = cut
                raise aiohttp.ClientPayloadError(cut)
            yield chunk

    def _count(self, direction: str, size: int) -> str | None:
        """Adds ``size`` bytes to the operation's; why it must stop now when that spends
        the owner's day (the egress proxy stops a connection there too)."""
        self.moved[direction] += size
        if self.moved["up"] + self.moved["down"] > self._day_left:
            return f"stopped: {_day_spent()}"
        return None

    def _refuse(self, status: int, message: str) -> web.Response:
        self.problem = self.problem or message  # the first cause (a cut body, then its 502)
        return _text(status, message)


def _day_spent() -> str:
    mb = settings.HARNESS_EGRESS_MB_PER_DAY
    return f"the daily egress bound ({mb} MiB a day, HARNESS_EGRESS_MB_PER_DAY; UTC) is used up"


def _text(status: int, message: str) -> web.Response:
    # Plain text: git shows a failed request's text/plain body as "remote: …" lines.
    return web.Response(status=status, text=message + "\n", content_type="text/plain")
