"""Where file work runs: a bounded pool of threads of its own, with the owner's identity.

File system calls block, so none runs on the event loop. They do not run in the default
executor either, which the database and the rest of the process share: a call stuck in
the kernel would pin one of its threads for good. Here the pool is bounded, each workspace
may hold only a few of its threads at once, and every call has a deadline; a caller that
waits past it gets an error while the stuck thread stays counted against that workspace
alone, so one user's stuck I/O can never starve another user's runs or the server.

A workspace whose server has dropped root (``Workspace.sandbox`` set) is not touched here
at all: the call goes, by name, to that user's own file host (agent/sandbox/host.py).

Each thread drops its supplementary groups once, and takes on the workspace owner's
filesystem identity (``setfsuid``/``setfsgid``, which Linux keeps per thread) for the
length of one call: a root server's file work is then checked by the kernel as the
owner's, so what the code might forget (a root-only file, another user's workspace) the
kernel still refuses, and what it creates belongs to the owner.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import logging
import os
import platform
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

from agent.core.tools.workspace import PathError, Workspace

log = logging.getLogger(__name__)

T = TypeVar("T")

THREADS = 16
PER_WORKSPACE = 3  # calls of one workspace in the pool at once (stuck ones included)
TIMEOUT = 30.0  # seconds a caller waits for one call

# setgroups through glibc is broadcast to every thread of the process; the raw system call
# changes only the calling thread, which is what a worker wants.
_SETGROUPS = {"x86_64": 116, "aarch64": 159}.get(platform.machine())
_libc = ctypes.CDLL(None, use_errno=True)


def _drop_groups() -> None:
    if os.geteuid() != 0 or _SETGROUPS is None:
        return
    if _libc.syscall(_SETGROUPS, 0, None) != 0:
        log.warning("file worker could not drop its supplementary groups")


@contextlib.contextmanager
def _identity(owner: tuple[int, int] | None) -> Iterator[None]:
    if owner is None:
        yield
        return
    uid, gid = owner
    _libc.setfsgid(gid)
    _libc.setfsuid(uid)
    try:
        # setfsuid reports no failure; asking with an invalid id returns the current one.
        if _libc.setfsuid(-1) & 0xFFFFFFFF != uid or _libc.setfsgid(-1) & 0xFFFFFFFF != gid:
            raise PathError("cannot take on the workspace owner's identity")
        yield
    finally:
        _libc.setfsuid(0)
        _libc.setfsgid(0)


class FileWorkers:
    def __init__(self, threads: int = THREADS, per_workspace: int = PER_WORKSPACE):
        self._threads = threads
        self._per_workspace = per_workspace
        self._start()
        # A forked child (a test's unprivileged probe, a worker process) inherits the pool
        # object but none of its threads: it would queue work nobody runs.
        os.register_at_fork(after_in_child=self._start)

    def _start(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self._threads, thread_name_prefix="harness-files", initializer=_drop_groups
        )
        self._busy: dict[str, int] = {}
        self._lock = threading.Lock()

    def _admit(self, key: str) -> None:
        with self._lock:
            if self._busy.get(key, 0) >= self._per_workspace:
                raise PathError("too many file operations are still in progress; try again")
            self._busy[key] = self._busy.get(key, 0) + 1

    def _release(self, key: str) -> None:
        with self._lock:
            left = self._busy.get(key, 1) - 1
            if left:
                self._busy[key] = left
            else:
                self._busy.pop(key, None)

    def submit(
        self, workspace: Workspace, fn: Callable[..., T], *args
    ) -> concurrent.futures.Future[T]:
        if workspace.sandbox is not None:  # the user's own file host does it, as the user
            return workspace.sandbox.submit(fn, args)
        key = str(workspace.root)
        self._admit(key)

        def call() -> T:
            try:
                with _identity(workspace.owner()):
                    return fn(*args)
            finally:
                self._release(key)

        try:
            future = self._pool.submit(call)
        except BaseException:
            self._release(key)
            raise
        # A call cancelled before it started never runs ``call``: give its place back here.
        future.add_done_callback(lambda f: f.cancelled() and self._release(key))
        return future

    async def run(self, workspace: Workspace, fn: Callable[..., T], *args,
                  timeout: float = TIMEOUT,
                  abandon: Callable[[T], None] | None = None) -> T:  # fmt: skip
        """``fn(*args)`` in a worker as the workspace's owner; from the event loop. When the
        caller stops waiting (deadline, cancellation), a call still queued never runs; one
        already running finishes in its thread, and ``abandon`` gets its result (to close a
        descriptor nobody will use)."""
        future = self.submit(workspace, fn, *args)
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout)
        except TimeoutError:
            self._abandon(future, abandon)
            raise PathError(f"the file operation did not finish within {timeout:g} s") from None
        except asyncio.CancelledError:
            self._abandon(future, abandon)
            raise

    @staticmethod
    def _abandon(future: concurrent.futures.Future, abandon: Callable | None) -> None:
        # Still queued: it must not run later (a write the model was told failed would
        # land after all, perhaps over its retry).
        if future.cancel() or abandon is None:
            return

        def done(f: concurrent.futures.Future) -> None:
            if not f.cancelled() and f.exception() is None:
                abandon(f.result())

        future.add_done_callback(done)

    def call(self, workspace: Workspace, fn: Callable[..., T], *args,
             timeout: float = TIMEOUT) -> T:  # fmt: skip
        """The same from a thread (a synchronous view)."""
        future = self.submit(workspace, fn, *args)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()  # still queued: it must not run later
            raise PathError(f"the file operation did not finish within {timeout:g} s") from None


workers = FileWorkers()
