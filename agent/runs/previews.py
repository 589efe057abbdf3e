"""Previews: connections to a port inside a conversation's terminal sandbox, through the
forwarder that the terminal's sandbox runs (agent/sandbox/preview_forwarder.py) on a Unix
socket in a directory made here, in the server's state directory, and bound into that
sandbox. The sandbox's network namespace stays closed: the server reaches it only there.

The directory is writable by the sandbox's user (another uid under a broker), so what is
in it is theirs: the socket is opened without following a link and must be a socket, and
the connection goes through that opened file (a planted link cannot send the server's
connection anywhere else). Each user has at most ``HARNESS_PREVIEW_CONNECTIONS_PER_USER``
connections open at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
from collections import Counter
from pathlib import Path

from django.conf import settings

from agent.sandbox.preview_mounts import SOCKET_NAME

MIN_PORT, MAX_PORT = 1, 65535
CONNECT_TIMEOUT = 10.0
ANSWER_LIMIT = 65536


class PreviewUnavailable(Exception):
    """Said to the one who asked (the 502 page): nothing to reach at that port."""


def directory(conversation_id) -> Path:
    """The socket's directory for ``conversation_id``, made when missing: closed to all
    but the server above it, writable (not listable) by the sandbox's user in it."""
    root = Path(settings.HARNESS_AGENT_STATE) / "previews"
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = root / str(conversation_id)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    os.chmod(path, 0o733)  # past the umask: the sandbox's uid makes its socket here
    return path


def _socket_fd(conversation_id) -> int:
    root = Path(settings.HARNESS_AGENT_STATE) / "previews" / str(conversation_id)
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        parent = os.open(root, flags | os.O_DIRECTORY)
    except OSError:
        raise PreviewUnavailable("The conversation's terminal is not running.") from None
    try:
        fd = os.open(SOCKET_NAME, flags, dir_fd=parent)
    except OSError:
        raise PreviewUnavailable("The conversation's terminal is not running.") from None
    finally:
        os.close(parent)
    if not stat.S_ISSOCK(os.fstat(fd).st_mode):
        os.close(fd)
        raise PreviewUnavailable("The conversation's terminal is not running.")
    return fd


async def _ask(conversation_id, line: bytes):
    fd = _socket_fd(conversation_id)
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(f"/proc/self/fd/{fd}", limit=ANSWER_LIMIT),
            CONNECT_TIMEOUT,
        )
    except (OSError, TimeoutError):
        raise PreviewUnavailable("The conversation's terminal is not running.") from None
    finally:
        os.close(fd)
    try:
        writer.write(line)
        answer = await asyncio.wait_for(reader.readline(), CONNECT_TIMEOUT)
    except (OSError, TimeoutError, ValueError):
        writer.close()
        raise PreviewUnavailable("The terminal's forwarder did not answer.") from None
    return reader, writer, answer


async def connect(conversation_id, port: int):
    """A stream to ``port`` inside the sandbox: (reader, writer)."""
    if not MIN_PORT <= port <= MAX_PORT:
        raise PreviewUnavailable(f"Ports are {MIN_PORT} to {MAX_PORT}.")
    reader, writer, answer = await _ask(conversation_id, f"{port}\n".encode())
    if answer != b"OK\n":
        writer.close()
        raise PreviewUnavailable(f"Nothing listens on port {port} in the sandbox.")
    return reader, writer


async def ports(conversation_id) -> list[int]:
    """The ports listening in the sandbox (none when its terminal is not running)."""
    try:
        _, writer, answer = await _ask(conversation_id, b"PORTS\n")
    except PreviewUnavailable:
        return []
    writer.close()
    try:
        found = json.loads(answer)
    except ValueError:
        return []
    if not isinstance(found, list):
        return []
    return sorted({p for p in found if isinstance(p, int) and MIN_PORT <= p <= MAX_PORT})


class Slots:
    """Each user's open preview connections, bounded."""

    def __init__(self) -> None:
        self._open: Counter[int] = Counter()

    @contextlib.contextmanager
    def take(self, user_id: int):
        if self._open[user_id] >= settings.HARNESS_PREVIEW_CONNECTIONS_PER_USER:
            raise PreviewUnavailable("Too many preview connections are open; close some.")
        self._open[user_id] += 1
        try:
            yield
        finally:
            self._open[user_id] -= 1
            if not self._open[user_id]:
                del self._open[user_id]


slots = Slots()
