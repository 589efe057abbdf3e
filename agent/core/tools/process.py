"""Run a child process with a timeout, an output cap and a process-group kill.

Output is drained concurrently while the child runs (a full pipe would otherwise block it
forever). Beyond the cap the middle is dropped, keeping the head and
the tail, where errors usually are. On timeout or cancellation the whole process group is
killed, so a backgrounded grandchild cannot outlive the tool call.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProcessResult:
    output: str
    stderr: str
    returncode: int | None  # None when killed on timeout
    timed_out: bool
    truncated: bool
    total_bytes: int


class HeadTailBuffer:
    """Keeps the first and last ``cap // 2`` bytes of a stream of any length."""

    def __init__(self, cap: int):
        self.cap = cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap // 2 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            excess = len(self.tail) - (self.cap - self.cap // 2)
            if excess > 0:
                del self.tail[:excess]

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        if not self.truncated:
            return head + self.tail.decode("utf-8", errors="replace")
        dropped = self.total - len(self.head) - len(self.tail)
        tail = self.tail.decode("utf-8", errors="replace")
        return f"{head}\n... ({dropped} bytes of output omitted) ...\n{tail}"


def drain_fd(fd: int, buffer: HeadTailBuffer) -> None:
    """Blocking: what the pipe ``fd`` carries until every writer closed it, into
    ``buffer``; ``fd`` closed after."""
    try:
        while chunk := os.read(fd, 65536):
            buffer.feed(chunk)
    finally:
        os.close(fd)


async def _drain(stream: asyncio.StreamReader | None, buffer: HeadTailBuffer) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        buffer.feed(chunk)


def kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def run_process(
    argv: Sequence[str],
    *,
    env: dict[str, str],
    timeout: float,
    output_cap: int,
    cwd: str | None = None,
    stdin: int | None = None,
    merge_stderr: bool = False,
    pass_fds: Sequence[int] = (),
    preexec_fn: Callable[[], None] | None = None,
    user: int | None = None,
    group: int | None = None,
    extra_groups: Sequence[int] | None = None,
) -> ProcessResult:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=stdin if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT if merge_stderr else asyncio.subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,  # its own process group, killed as a whole
        pass_fds=tuple(pass_fds),
        preexec_fn=preexec_fn,
        user=user,
        group=group,
        extra_groups=extra_groups,
    )
    out, err = HeadTailBuffer(output_cap), HeadTailBuffer(16384)
    drains = asyncio.gather(_drain(proc.stdout, out), _drain(proc.stderr, err))
    timed_out = False
    try:
        async with asyncio.timeout(timeout):
            await proc.wait()
            # The command is done; whatever it left running in its group would hold the
            # pipes open (and outlive the call), so the group goes now. Buffered output
            # stays readable after the kill.
            kill_group(proc.pid)
            await drains
    except TimeoutError:
        timed_out = True
    finally:
        kill_group(proc.pid)
        if proc.returncode is None:
            with contextlib.suppress(Exception):
                await asyncio.shield(proc.wait())
        if not drains.done():
            drains.cancel()
            with contextlib.suppress(BaseException):
                await drains
    return ProcessResult(
        output=out.text(),
        stderr=err.text(),
        returncode=None if timed_out else proc.returncode,
        timed_out=timed_out,
        truncated=out.truncated,
        total_bytes=out.total,
    )


def plain_env() -> dict[str, str]:
    """A minimal environment for helper commands: never the server's (API key, secrets)."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C", "LANG": "C"}
