"""The file host's project operations, each in a sandbox that shows only what it is
about (agent/sandbox/projects.py ``open_view``): the file host itself sees every project
of its user, so git run there would follow a link an agent swaps into its repository
while the operation runs to another project, another conversation's worktree or the
workspace. A worker per scope (a conversation, or a project) is started once, bubblewrap
inside the host's sandbox (a user namespace of the user's own), and answers that scope's
operations one after another: the sandbox's start is paid once, not per checkpoint.
Bounded: ``WORKERS`` at once, the least recently used let go first."""

from __future__ import annotations

import collections
import contextlib
import os
import socket
import subprocess
import threading

from agent.core.git import GitError
from agent.core.projects import MOUNT
from agent.core.projects import ops as project_ops
from agent.core.projects.layout import hex_id
from agent.core.tools.bwrap import SANDBOX_PATH, bwrap_path
from agent.sandbox import ops
from agent.sandbox.projects import TIMEOUT, command, open_view
from agent.sandbox.wire import WireError, read_frame, write_frame

WORKERS = 8
SERVE = "from agent.sandbox.project_oneshot import serve; serve({fd})"


class Worker:
    def __init__(self, workspace: str, name: str, args: dict):
        bwrap = bwrap_path()
        if bwrap is None:
            raise GitError("projects need the sandbox: bubblewrap (bwrap) is not installed")
        fd = os.open(workspace, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            view = open_view(fd, name, args, None)
        finally:
            os.close(fd)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # No /proc: the host's own has parts mounted over, which a user namespace
            # may not mount again (git and the worker need none).
            argv = command(bwrap, view, None, SERVE.format(fd=theirs.fileno()), proc=False)
            self.process = subprocess.Popen(
                argv, pass_fds=[*view.fds, theirs.fileno()], env={"PATH": SANDBOX_PATH},
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )  # fmt: skip
        except BaseException:
            mine.close()
            raise
        finally:
            view.close()
            theirs.close()
        mine.settimeout(TIMEOUT)
        self.sock = mine
        self.lock = threading.Lock()  # one operation at a time
        self.dead = False

    def ask(self, name: str, args: dict) -> tuple[dict, bytes]:
        with self.lock:
            try:
                write_frame(self.sock, {"name": name, "args": args})
                reply, blob = read_frame(self.sock)
            except (WireError, OSError) as exc:
                self._end()
                said = self._said()
                raise GitError(f"the project's sandbox failed: {said or exc}") from None
        if not reply.get("ok"):
            raise ops.error_of(reply)
        return ops.result_of("project", reply.get("result"), blob)

    def _said(self) -> str:
        """What bubblewrap or the worker wrote before it ended (why it could not start)."""
        with contextlib.suppress(OSError, ValueError):
            return self.process.stderr.read(4000).decode(errors="replace").strip()[-500:]
        return ""

    def close(self) -> None:
        """Let it go once its operation under way, if any, is answered."""
        with self.lock:
            self._end()

    def _end(self) -> None:
        # Its end of the socket closed, the worker returns; bubblewrap's child dies with it.
        self.dead = True
        with contextlib.suppress(OSError):
            self.sock.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Workers:
    def __init__(self, workspace: str = "/workspace"):
        self.workspace = workspace
        self.lock = threading.Lock()
        self.running: collections.OrderedDict[tuple[str, str], Worker] = collections.OrderedDict()

    def run(self, name: str, args: dict) -> tuple[dict, bytes]:
        key = project_ops.scope(name, args)
        if name in project_ops.WHOLE:
            # No repository an agent has had is read: run here, where every project is.
            self.let_go(key[0])
            return project_ops.run(MOUNT, name, args)
        with self.lock:
            worker = self.running.pop(key, None) or Worker(self.workspace, name, args)
            self.running[key] = worker
            old = self.running.popitem(last=False)[1] if len(self.running) > WORKERS else None
        if old is not None:
            old.close()
        try:
            return worker.ask(name, args)
        except GitError:
            if worker.dead:  # the next operation of this scope starts another
                with self.lock:
                    if self.running.get(key) is worker:
                        del self.running[key]
            raise
        finally:
            if name in ("add_worktree", "remove_worktree"):
                # A conversation's worker shows the worktree it found at its start.
                self.let_go(key[0], args.get("conversation"))

    def let_go(self, project: str, conversation=None) -> None:
        """The workers of a project (or of one of its conversations) ended."""
        only = hex_id(conversation) if conversation else None
        with self.lock:
            keys = [k for k in self.running if k[0] == project and only in (None, k[1])]
            gone = [self.running.pop(k) for k in keys]
        for worker in gone:
            worker.close()
