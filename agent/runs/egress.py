"""Where the egress proxy runs (``HARNESS_EGRESS=proxy``): in the event loop of the server
process that starts the sandboxes, as asyncio tasks, never in the root broker (it needs no
root) and never in a web request's path. Each conversation gets a Unix socket of its own
on the first sandbox it starts (bash, its CLI agent, its terminal); whoever connects to
that socket speaks as the conversation's owner and the conversation, so the proxy never
takes the sandbox's word for who asks.

The socket is made in a fresh directory closed to everyone but the server. Under a
broker the server opens it (``O_PATH``) and hands the broker that descriptor, which binds
it into the sandbox: the broker is given no path. A root server without a broker gives the
socket to the sandbox user's uid; a server that is not root keeps it to itself (its
sandboxes run as its own uid).

Each server process has its own proxy: the per-user daily byte bound is checked against
the shared ledger plus what this process has in flight, so with several processes a user
may overshoot it by what the others have in flight at that moment.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import os
import shutil
import tempfile
import weakref
from collections import OrderedDict

from django.conf import settings

from agent.egress.proxy import EgressProxy, Who
from agent.runs.workspaces import sandbox_ids
from agent.sandbox import drop

# Conversations whose socket a process keeps open; past it the least recently used closes
# (a shell of that conversation still running reaches no network until it is restarted).
MAX_SOCKETS = 512


def enabled() -> bool:
    return settings.HARNESS_EGRESS == "proxy"


def credential(user_id: int, host: str, port: int) -> str | None:
    """The user's stored git credential for this host (agent/runs/git_credentials.py), as
    Basic authorization: to that host only."""
    from agent.models import GitCredential
    from agent.runs.git_credentials import unseal

    names = [host, f"{host}:{port}"]
    row = GitCredential.objects.filter(user_id=user_id, host__in=names).first()
    token = row and unseal(user_id, row.host, bytes(row.secret))
    if not token:
        return None
    return "Basic " + base64.b64encode(f"{row.username}:{token}".encode()).decode()


class Sockets:
    """One event loop's proxy and its conversations' sockets."""

    def __init__(self) -> None:
        self.proxy = EgressProxy(credential=credential)
        self._paths: OrderedDict[str, str] = OrderedDict()
        self._making: dict[str, asyncio.Future] = {}

    async def socket_for(self, user_id: int, conversation_id) -> str:
        key = str(conversation_id)
        while key not in self._paths:
            if key in self._making:  # another sandbox of the conversation is making it
                await asyncio.shield(self._making[key])
                continue
            made = self._making[key] = asyncio.get_running_loop().create_future()
            try:
                self._paths[key] = await self._listen(user_id, conversation_id)
            finally:
                del self._making[key]
                made.set_result(None)
            await self._trim()
        self._paths.move_to_end(key)
        return self._paths[key]

    async def _listen(self, user_id: int, conversation_id) -> str:
        directory = tempfile.mkdtemp(prefix="harness-egress-")
        _directories.add(directory)
        path = os.path.join(directory, "s")
        try:
            await self.proxy.listen(path, Who(int(user_id), conversation_id))
            ids = sandbox_ids(user_id)
            if drop.broker() is not None:
                # Handed over by descriptor; the directory stays the server's alone.
                os.chmod(path, 0o666)
            elif ids is not None:  # a root server's sandbox user connects to it; nobody else
                os.chown(directory, *ids)
                os.chown(path, *ids)
                os.chmod(path, 0o600)
            else:
                os.chmod(path, 0o600)
        except BaseException:
            await self.proxy.close(path)
            _remove(directory)
            raise
        return path

    async def _trim(self) -> None:
        while len(self._paths) > MAX_SOCKETS:
            _, path = self._paths.popitem(last=False)
            await self.close(path)

    async def close(self, path: str | None = None) -> None:
        paths = [path] if path else list(self._paths.values())
        for one in paths:
            await self.proxy.close(one)
            _remove(os.path.dirname(one))
        if path is None:
            self._paths.clear()


# The sockets' directories this process made; what is left goes when it exits.
_directories: set[str] = set()


def _remove(directory: str) -> None:
    _directories.discard(directory)
    shutil.rmtree(directory, ignore_errors=True)


@atexit.register
def _remove_all() -> None:
    for directory in list(_directories):
        _remove(directory)


# One per event loop: the server has one; each test its own.
_by_loop: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def sockets() -> Sockets:
    loop = asyncio.get_running_loop()
    if loop not in _by_loop:
        _by_loop[loop] = Sockets()
    return _by_loop[loop]


async def socket_for(user_id: int, conversation_id) -> str | None:
    """The conversation's egress socket, listening; None when the policy is ``off``."""
    if not enabled():
        return None
    return await sockets().socket_for(user_id, conversation_id)
