"""Previews: connections to a port inside a conversation's terminal sandbox (or its CLI
agent's, under a broker), through the forwarder that sandbox runs
(agent/sandbox/preview_forwarder.py) on a Unix socket in a directory made here, in the
server's state directory, and bound into that sandbox. The sandbox's network namespace
stays closed: the server reaches it only there. A port is looked for in the terminal's
sandbox first, then the CLI's; the ports listed are both's.

The directory is writable by the sandbox's user (another uid under a broker), so what is
in it is theirs: the socket is opened without following a link and must be a socket, and
the connection goes through that opened file (a planted link cannot send the server's
connection anywhere else). Each user has at most ``HARNESS_PREVIEW_CONNECTIONS_PER_USER``
connections open at once.

A sandbox's own plumbing on its loopback is never a preview: the CLI agent's model
gateway (whoever reaches it calls the model on the owner's budget, and a preview's readers
include viewers, who may not prompt) and the egress proxy's forwarder. The CLI's sandbox
holds the CLI itself (and whatever it serves on its loopback to drive it), so the callers
give its ports only to those who may drive the conversation (``sandboxes``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import stat
from collections import Counter
from pathlib import Path

from django.conf import settings

from agent.core.tools.bwrap import EGRESS_PORT
from agent.runs.llm_gateway import PORT_IN_SANDBOX as GATEWAY_PORT
from agent.sandbox.preview_mounts import SOCKET_NAME

MIN_PORT, MAX_PORT = 1, 65535
CONNECT_TIMEOUT = 10.0
READERS_SHARE = 32  # a conversation's non-driving readers' connections (a forwarder has 64)
ANSWER_LIMIT = 65536
NOT_RUNNING = "The conversation's terminal is not running."


class PreviewUnavailable(Exception):
    """Said to the one who asked (the 502 page): nothing to reach at that port."""


class PreviewForbidden(PreviewUnavailable):
    """Said to the one who asked (a 403): that port is the sandbox's own plumbing."""


def plumbing() -> dict[int, str]:
    """The ports on a sandbox's loopback that are the deployment's, not the user's."""
    found = {GATEWAY_PORT: "the CLI agent's model gateway"}
    if settings.HARNESS_EGRESS == "proxy":
        found[EGRESS_PORT] = "the egress proxy's forwarder"
    return found


SHELL, AGENT = "", "-agent"  # whose sandbox: the terminal's, the CLI agent's
SANDBOXES = (SHELL, AGENT)


def _path(conversation_id, sandbox: str = SHELL) -> Path:
    return Path(settings.HARNESS_AGENT_STATE) / "previews" / f"{conversation_id}{sandbox}"


def directory(conversation_id, sandbox: str = SHELL) -> Path:
    """The socket's directory for ``conversation_id``'s sandbox, made when missing: closed
    to all but the server above it, writable (not listable) by the sandbox's user in it."""
    path = _path(conversation_id, sandbox)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    os.chmod(path, 0o733)  # past the umask: the sandbox's uid makes its socket here
    return path


def remove(conversation_id) -> None:
    """The sockets' directories go with the conversation."""
    for sandbox in SANDBOXES:
        shutil.rmtree(_path(conversation_id, sandbox), ignore_errors=True)


def _socket_fd(conversation_id, sandbox: str) -> int:
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        parent = os.open(_path(conversation_id, sandbox), flags | os.O_DIRECTORY)
    except OSError:
        raise PreviewUnavailable(NOT_RUNNING) from None
    try:
        fd = os.open(SOCKET_NAME, flags, dir_fd=parent)
    except OSError:
        raise PreviewUnavailable(NOT_RUNNING) from None
    finally:
        os.close(parent)
    if not stat.S_ISSOCK(os.fstat(fd).st_mode):
        os.close(fd)
        raise PreviewUnavailable(NOT_RUNNING)
    return fd


async def _connected(conversation_id, sandbox: str = SHELL) -> socket.socket:
    fd = _socket_fd(conversation_id, sandbox)
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        await asyncio.wait_for(loop.sock_connect(sock, f"/proc/self/fd/{fd}"), CONNECT_TIMEOUT)
    except (OSError, TimeoutError):
        sock.close()
        raise PreviewUnavailable(NOT_RUNNING) from None
    except BaseException:  # cancelled: the socket is not left to the collector
        sock.close()
        raise
    finally:
        os.close(fd)
    return sock


async def _ask(conversation_id, line: bytes, sandbox: str) -> tuple[socket.socket, bytes]:
    """A connection to the forwarder that was sent ``line``, and its answer's line (read a
    byte at a time: what follows it is the previewed server's)."""
    sock = await _connected(conversation_id, sandbox)
    loop = asyncio.get_running_loop()
    try:
        await loop.sock_sendall(sock, line)
        answer = await asyncio.wait_for(_line(loop, sock), CONNECT_TIMEOUT)
    except (OSError, TimeoutError):
        sock.close()
        raise PreviewUnavailable("The terminal's forwarder did not answer.") from None
    except BaseException:
        sock.close()
        raise
    return sock, answer


async def _line(loop, sock: socket.socket) -> bytes:
    answer = b""
    while not answer.endswith(b"\n") and len(answer) < ANSWER_LIMIT:
        byte = await loop.sock_recv(sock, 1)
        if not byte:
            break
        answer += byte
    return answer


async def connect_socket(conversation_id, port: int, sandboxes=SANDBOXES) -> socket.socket:
    """A connected socket to ``port`` inside the first of ``sandboxes`` where it listens
    (non-blocking)."""
    if not MIN_PORT <= port <= MAX_PORT:
        raise PreviewUnavailable(f"Ports are {MIN_PORT} to {MAX_PORT}.")
    if port in plumbing():
        raise PreviewForbidden(f"Port {port} is the sandbox's own ({plumbing()[port]}): "
                               "it is not previewed.")  # fmt: skip
    problem = None
    for sandbox in sandboxes:
        try:
            sock, answer = await _ask(conversation_id, f"{port}\n".encode(), sandbox)
        except PreviewUnavailable as exc:
            problem = problem or exc  # the terminal's, when neither runs
            continue
        if answer == b"OK\n":
            return sock
        sock.close()
        problem = PreviewUnavailable(f"Nothing listens on port {port} in the sandbox.")
    raise problem


async def connect(conversation_id, port: int, sandboxes=SANDBOXES):
    """A stream to ``port`` inside the sandbox: (reader, writer)."""
    sock = await connect_socket(conversation_id, port, sandboxes)
    return await asyncio.open_unix_connection(sock=sock, limit=ANSWER_LIMIT)


async def ports(conversation_id, sandboxes=SANDBOXES) -> list[int]:
    """The ports listening in the conversation's ``sandboxes`` (none when none runs)."""
    found = set()
    for sandbox in sandboxes:
        try:
            sock, answer = await _ask(conversation_id, b"PORTS\n", sandbox)
        except PreviewUnavailable:
            continue
        sock.close()
        try:
            listed = json.loads(answer)
        except ValueError:
            continue
        if isinstance(listed, list):
            found |= {p for p in listed if isinstance(p, int) and MIN_PORT <= p <= MAX_PORT}
    return sorted(found - set(plumbing()))


async def request(conversation_id, line: str, payload: bytes = b"", limit: int = 262144):
    """The forwarder's JSON answer to ``line`` (and ``payload`` after it): its background
    jobs (agent/sandbox/preview_forwarder.py), read to its end within ``CONNECT_TIMEOUT``
    seconds in all (the forwarder is the sandbox's: one trickling a byte at a time holds
    no caller longer). ``PreviewUnavailable`` when it is not running or answers nothing
    readable."""
    sock = await _connected(conversation_id)
    loop = asyncio.get_running_loop()

    async def exchange() -> bytes:
        answer = b""
        await loop.sock_sendall(sock, line.encode() + b"\n" + payload)
        while len(answer) <= limit:
            more = await loop.sock_recv(sock, 65536)
            if not more:
                break
            answer += more
        return answer

    try:
        answer = await asyncio.wait_for(exchange(), CONNECT_TIMEOUT)
    except (OSError, TimeoutError):
        raise PreviewUnavailable("The terminal's forwarder did not answer.") from None
    finally:
        sock.close()
    if answer.startswith(b"ERR too many"):
        raise PreviewUnavailable("The terminal's forwarder is busy: too many connections.")
    if answer.startswith(b"ERR "):  # a forwarder started before this server knew jobs
        raise PreviewUnavailable("The terminal's sandbox predates background jobs: end its "
                                 "shell (`exit` in the Terminal) and try again.")  # fmt: skip
    try:
        return json.loads(answer)
    except ValueError:
        raise PreviewUnavailable("The terminal's forwarder did not answer.") from None


class Slots:
    """Open preview connections, bounded: each user's, and the readers' of a conversation
    who may not drive it, together (half of a forwarder's connections): viewers cannot
    take all of a sandbox's connections from those who drive it."""

    def __init__(self) -> None:
        self._open: Counter[int] = Counter()
        self._reading: Counter = Counter()

    def acquire(self, user_id: int, reading=None) -> None:
        """``reading``: the conversation, when the user only reads it."""
        if self._open[user_id] >= settings.HARNESS_PREVIEW_CONNECTIONS_PER_USER:
            raise PreviewUnavailable("Too many preview connections are open; close some.")
        if reading is not None and self._reading[reading] >= READERS_SHARE:
            raise PreviewUnavailable("Too many preview connections of this conversation's "
                                     "viewers are open; try again later.")  # fmt: skip
        self._open[user_id] += 1
        if reading is not None:
            self._reading[reading] += 1

    def release(self, user_id: int, reading=None) -> None:
        for counter, key in ((self._open, user_id), (self._reading, reading)):
            if key is None:
                continue
            counter[key] -= 1
            if counter[key] <= 0:
                del counter[key]


slots = Slots()
