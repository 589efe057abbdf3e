"""The unprivileged server's side of the broker: its requests, each user's file host, and
bash commands run in a user's sandbox.

Replies come back on reader threads of their own (never the event loop's default
executor, which the database shares), matched to their requests by id.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import os
import socket
import threading
from typing import Any

from agent.core.tools.cgroups import RunStats
from agent.core.tools.process import HeadTailBuffer, ProcessResult, drain_fd
from agent.core.tools.workspace import PathError
from agent.sandbox import git_spawn, ops
from agent.sandbox.wire import WireError, read_frame, recv_packet, send_packet, write_frame

REQUEST_TIMEOUT = 600.0  # a workspace's first mount may migrate an old one (a copy)
KILL_GRACE = 10.0
READY_TIMEOUT = 30.0


class BrokerError(RuntimeError):
    """The broker refused a request, or is gone."""


def _thread(fn, *args) -> asyncio.Future:
    """``fn(*args)`` on a thread of its own, awaited from the event loop."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def target() -> None:
        try:
            value = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            error = exc
            loop.call_soon_threadsafe(lambda: future.done() or future.set_exception(error))
        else:
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(value))

    threading.Thread(target=target, daemon=True).start()
    return future


class Broker:
    """The server's connection to its broker (one per server process)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._ids = itertools.count(1)
        self._waiting: dict[int, concurrent.futures.Future] = {}
        self._lock = threading.Lock()
        self._sandboxes: dict[int, UserSandbox] = {}
        threading.Thread(target=self._read, name="broker-replies", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                message, fds = recv_packet(self.sock)
            except (WireError, OSError) as exc:
                with self._lock:
                    waiting, self._waiting = self._waiting, {}
                for future in waiting.values():
                    future.set_exception(BrokerError(f"the broker is gone ({exc})"))
                return
            with self._lock:
                future = self._waiting.pop(message.get("id"), None)
            if future is None:
                for fd in fds:
                    os.close(fd)
            else:
                future.set_result((message, fds))

    def request(self, op: str, fds: list[int] = (), **fields: Any) -> tuple[dict, list[int]]:
        """Blocking: the broker's answer and the descriptors it sent (``fds`` go with the
        request; they stay the caller's to close)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            request_id = next(self._ids)
            self._waiting[request_id] = future
        try:
            send_packet(self.sock, {"op": op, "id": request_id, **fields}, fds)
            message, fds = future.result(REQUEST_TIMEOUT)
        except (OSError, concurrent.futures.TimeoutError) as exc:
            with self._lock:
                self._waiting.pop(request_id, None)
            raise BrokerError(f"the broker did not answer ({exc})") from exc
        if not message.get("ok"):
            for fd in fds:
                os.close(fd)
            raise BrokerError(str(message.get("error", "refused")))
        return message, fds

    def sandbox(self, user_id: int) -> UserSandbox:
        with self._lock:
            if user_id not in self._sandboxes:
                self._sandboxes[user_id] = UserSandbox(self, user_id)
            return self._sandboxes[user_id]


class UserSandbox:
    """One user's side of the broker: their file host (started on first use, again after
    it died) and their bash commands. What ``Workspace.sandbox`` holds."""

    # (project, conversation) hex ids: the file work, tools and bash of a conversation in
    # a project, in its worktree (``worktree``); None: the user's own workspace.
    scope: list[str] | None = None

    def __init__(self, broker: Broker, user_id: int):
        self.broker = broker
        self.user_id = user_id
        self._host: HostConnection | None = None
        self._lock = threading.Lock()

    def worktree(self, project: str, conversation: str) -> UserSandbox:
        """This user's sandbox as a project conversation sees it (one host serves both)."""
        return WorktreeSandbox(self, [project, conversation])

    def project_home(self, project: str) -> UserSandbox:
        """This user's sandbox with a project's directory as its root (an archive is
        unpacked there)."""
        return WorktreeSandbox(self, [project])

    def project(self, name: str, args: dict, timeout: float = REQUEST_TIMEOUT):
        """Blocking: a project operation (agent/core/projects/ops.py) run by the user's file
        host, as the user, in their sandbox: (JSON result, bytes)."""
        future = self._connection().submit("project", [name, args], b"", "project")
        return future.result(timeout)

    def _connection(self) -> HostConnection:
        with self._lock:
            if self._host is None or self._host.closed:
                _, fds = self.broker.request("host", user=self.user_id)
                self._host = HostConnection(socket.socket(fileno=fds[0]))
            return self._host

    def submit(self, fn, args: tuple) -> concurrent.futures.Future:
        name, json_args, blob = ops.request_of(fn, args)
        return self._connection().submit(name, json_args, blob, decode=name, scope=self.scope)

    def cli_home(self, conversation: str, files: dict[str, str]) -> None:
        """Blocking: the conversation's CLI home and its files, made by the user's host."""
        future = self._connection().submit("cli_home", [conversation, files], b"", None)
        future.result(REQUEST_TIMEOUT)

    def call(self, op: str, args: list, blob: bytes = b"", timeout: float = READY_TIMEOUT):
        """Blocking: one operation of the host's (agent/sandbox/ops.py), its JSON result."""
        future = self._connection().submit(op, args, blob, None, scope=self.scope)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise PathError(f"the file operation did not finish within {timeout:g} s") from None

    def ensure_host(self) -> None:
        """Blocking: the host runs (it makes the hidden homes before any sandbox can)."""
        self._connection()

    def cli_ticket(self, conversation: str, program: str, env: dict[str, str],
                   cli_root: str | None, gateway_socket: str | None,
                   egress_socket: str | None = None,
                   preview_dir: str | None = None) -> str:  # fmt: skip
        """Blocking: a ticket for a pane to start this CLI's sandbox with (a CLI agent's, or
        the Terminal panel's shell): its model gateway's socket, and the egress proxy's
        (its only route out), handed over as descriptors opened here; ``preview_dir``: the
        directory of the terminal's preview socket, bound in writable."""
        fds = []
        try:
            for path in (gateway_socket, egress_socket):
                if path:
                    fds.append(os.open(path, os.O_PATH | os.O_CLOEXEC))
            if preview_dir:
                flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
                fds.append(os.open(preview_dir, flags))
            reply, _ = self.broker.request(
                "cli", fds, user=self.user_id, conversation=conversation, program=program,
                env=env, cli_root=cli_root, project=self.scope[0] if self.scope else None,
                egress=bool(egress_socket), preview=bool(preview_dir),
            )  # fmt: skip
        finally:
            for fd in fds:
                os.close(fd)
        return str(reply["ticket"])

    def tool_future(self, name: str, params: dict, op: str = "tool") -> concurrent.futures.Future:
        return self._connection().submit(op, [name, params], b"", decode=None, scope=self.scope)

    async def tool(self, name: str, params: dict, timeout: float):
        from agent.core.tools.base import ToolResult

        result = await self._await(self.tool_future(name, params), timeout)
        try:
            return ToolResult(str(result["content"]), bool(result["is_error"]),
                              result["display"] if isinstance(result["display"], dict)
                              else None)  # fmt: skip
        except (TypeError, KeyError):
            raise PathError("the workspace's file host answered out of shape") from None

    async def preview(self, name: str, params: dict, timeout: float) -> dict | None:
        result = await self._await(self.tool_future(name, params, "preview"), timeout)
        return result if isinstance(result, dict) else None

    @staticmethod
    async def _await(future: concurrent.futures.Future, timeout: float):
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except TimeoutError:
            raise PathError(f"the file operation did not finish within {timeout:g} s") from None

    async def bash(self, command: str, timeout: float, output_cap: int, unsafe: bool = False,
                   egress: str | None = None):  # fmt: skip
        """The command in the user's sandbox (``unsafe``: as the user, unsandboxed):
        (ProcessResult, RunStats, the workspace's disk usage after it or None).
        ``egress``: the egress proxy's socket, its only route out, handed over as a
        descriptor opened here."""
        where = {"project": self.scope[0], "conversation": self.scope[1]} if self.scope else {}
        sent = [os.open(egress, os.O_PATH | os.O_CLOEXEC)] if egress else []

        def request():  # the descriptor closed by the thread that sent it, cancelled or not
            try:
                return self.broker.request("bash", sent, user=self.user_id, command=command,
                                           unsafe=unsafe, **where)  # fmt: skip
            finally:
                for fd in sent:
                    os.close(fd)

        _, fds = await _thread(request)
        result, message = await _supervised(fds, timeout, output_cap)
        stats = RunStats(int(message.get("oom_kills", 0)), int(message.get("pids_hits", 0)))
        disk = message.get("disk")
        usage = tuple(int(n) for n in disk) if isinstance(disk, list) and len(disk) == 4 else None
        return result, stats, usage

    async def clone(self, fields: dict, relay_socket: str, timeout: float) -> ProcessResult:
        """A clone run by the user's file host (agent/sandbox/host_clone.py), its network
        through the relay's socket, handed over as a descriptor opened here."""
        fd = os.open(relay_socket, os.O_PATH | os.O_CLOEXEC)
        try:
            future = self._connection().submit("git_clone", fields, b"", None, fds=(fd,))
        finally:
            os.close(fd)  # sent: the host holds its own
        try:
            said = await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except TimeoutError:  # the host stops git at the clone's own limit, well before
            future.cancel()
            return ProcessResult(output="", stderr="", returncode=None, timed_out=True,
                                 truncated=False, total_bytes=0)  # fmt: skip
        try:
            # (the host keeps as much; its note of what it left out comes on top)
            output, code = str(said["output"])[-2 * git_spawn.OUTPUT_CAP :], int(said["exit"])
            return ProcessResult(output=output, stderr="", returncode=code, timed_out=False,
                                 truncated=bool(said["truncated"]),
                                 total_bytes=int(said["total"]))  # fmt: skip
        except (TypeError, KeyError, ValueError):
            raise PathError("the workspace's file host answered out of shape") from None

    async def git(self, fields: dict, relay_socket: str, timeout: float,
                  output_cap: int) -> ProcessResult:  # fmt: skip
        """A push in the user's sandbox (agent/sandbox/git_spawn.py), its network through
        the relay's socket, handed over as a descriptor opened here."""
        fd = os.open(relay_socket, os.O_PATH | os.O_CLOEXEC)
        try:
            request = functools.partial(self.broker.request, "git", [fd], user=self.user_id,
                                        **fields)  # fmt: skip
            _, fds = await _thread(request)
        finally:
            os.close(fd)
        result, _ = await _supervised(fds, timeout, output_cap)
        return result


async def _supervised(fds: list[int], timeout: float, output_cap: int):
    """A process the broker started: its output (the pipe) read while it runs, killed past
    ``timeout`` (through the control socket); (ProcessResult, the broker's last word)."""
    read_fd, control = fds[0], socket.socket(fileno=fds[1])
    out = HeadTailBuffer(output_cap)
    drained = _thread(drain_fd, read_fd, out)
    ended = _thread(recv_packet, control)
    timed_out = False
    try:
        async with asyncio.timeout(timeout):
            message, _ = await asyncio.shield(ended)
    except TimeoutError:
        timed_out = True
    finally:
        if not ended.done():
            with contextlib.suppress(OSError):
                send_packet(control, {"kill": True})
        try:
            message, _ = await asyncio.wait_for(asyncio.shield(ended), KILL_GRACE)
            await asyncio.wait_for(asyncio.shield(drained), KILL_GRACE)
        except (TimeoutError, WireError, OSError):
            message = {}
        finally:
            control.close()
    code = message.get("exit")
    result = ProcessResult(
        output=out.text(), stderr="", returncode=None if timed_out else code,
        timed_out=timed_out, truncated=out.truncated, total_bytes=out.total,
    )  # fmt: skip
    return result, message


class WorktreeSandbox(UserSandbox):
    """A project conversation's view of its user's sandbox: the same file host, asked
    about the conversation's worktree; bash and the CLI in that worktree."""

    def __init__(self, parent: UserSandbox, scope: list[str]):
        self.parent = parent
        self.broker = parent.broker
        self.user_id = parent.user_id
        self.scope = scope

    def _connection(self) -> HostConnection:
        return self.parent._connection()


class HostConnection:
    """The socket to one file host; requests may overlap, replies come by id."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.closed = False
        # Its first frame says it has made what sandboxes rely on (the hidden CLI homes).
        sock.settimeout(READY_TIMEOUT)
        try:
            header, _ = read_frame(sock)
        except (WireError, OSError) as exc:
            sock.close()
            raise PathError(f"the workspace's file host did not start ({exc})") from None
        sock.settimeout(None)
        if header.get("ready") is not True:
            sock.close()
            raise PathError("the workspace's file host did not start")
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[concurrent.futures.Future, str | None]] = {}
        self._lock = threading.Lock()
        threading.Thread(target=self._read, name="file-host", daemon=True).start()

    def submit(self, op: str, args: list | dict, blob: bytes, decode: str | None,
               scope: list[str] | None = None, fds: tuple[int, ...] = ()):  # fmt: skip
        future: concurrent.futures.Future = concurrent.futures.Future()
        header = {"id": None, "op": op, "args": args}
        if scope is not None:
            header["scope"] = scope
        with self._lock:
            request_id = header["id"] = next(self._ids)
            self._waiting[request_id] = (future, decode)
            try:
                write_frame(self.sock, header, blob, fds)
            except OSError:
                self._waiting.pop(request_id, None)
                self.closed = True
                raise PathError("the workspace's file host is gone; try again") from None
        return future

    def _read(self) -> None:
        while True:
            try:
                header, blob = read_frame(self.sock)
            except (WireError, OSError):
                break
            with self._lock:
                future, decode = self._waiting.pop(header.get("id"), (None, None))
            if future is None or future.cancelled():
                continue
            if not header.get("ok"):
                future.set_exception(ops.error_of(header))
            elif decode is None:
                future.set_result(header.get("result"))
            else:
                try:
                    future.set_result(ops.result_of(decode, header.get("result"), blob))
                except PathError as exc:
                    future.set_exception(exc)
        self.closed = True
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for future, _ in waiting.values():
            if not future.done():
                future.set_exception(PathError("the workspace's file host stopped; try again"))
        with contextlib.suppress(OSError):
            self.sock.close()
