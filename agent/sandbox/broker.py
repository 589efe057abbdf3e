"""The broker: the one process that keeps root once the server has dropped it.

It is started by the root launcher (``drop``) as ``python -m agent.sandbox.broker FD`` with
its configuration on standard input, and serves the server over the SOCK_SEQPACKET socket
FD. Its requests are few and validated: make a user's workspace (``workspace``), start that
user's file host (``host``), run a bash command (``bash``, ``bash_spawn``), clone or push a
project's repository through the git relay (``git``), hand a CLI agent's pane to a
sandbox (``cli`` then ``attach``), and run the start-up self-test (``selftest``). A request
names a user by number and a kind; every path, uid, limit and mount comes from the broker's
own configuration, so no request can make it open a path inside a user-writable tree. When
the server's socket closes, every process the broker started is killed and it exits.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from agent.core.tools.bash import MEMORY_LIMIT, disk_usage
from agent.core.tools.bwrap import bwrap_path, sandbox_argv
from agent.core.tools.cgroups import SandboxLimits, sandbox_cgroups
from agent.sandbox import bash_spawn, cli_spawn, egress_socket, git_spawn, project_mounts
from agent.sandbox.spawn import HOST_NOFILE, SPAWN_ENV, BrokerConfig, host_argv, limits
from agent.sandbox.wire import WireError, recv_packet, send_packet

log = logging.getLogger("harness.broker")

MAX_USER = 1 << 24
TICKET_SECONDS = 60.0  # a pane presents its ticket within a second; an unused one expires
SELFTEST_WORD = "sandbox-ok"
SELFTEST_SECONDS = 30


class Refused(Exception):
    """A request outside the protocol; its message goes back to the server."""


def _user(message: dict) -> int:
    user = message.get("user")
    if type(user) is not int or not 0 < user < MAX_USER:
        raise Refused("user must be a positive integer")
    return user


class Broker:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.bwrap = bwrap_path()
        self.cgroups = sandbox_cgroups(SandboxLimits(
            pids=config.pids, memory_mb=config.memory_mb, cgroups=config.cgroups,
            cgroup_path=config.cgroup_path,
        ))  # fmt: skip
        self.children: set[subprocess.Popen] = set()
        self.tickets: dict[str, tuple[float, dict]] = {}
        self._spawner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spawner")
        self.lock = threading.Lock()
        self.send_lock = threading.Lock()
        self.workspaces = Path(config.workspaces)
        # Held from the start: each request opens a user's workspace below this descriptor,
        # whatever later happens to the path.
        self.workspaces.mkdir(mode=0o711, parents=True, exist_ok=True)
        self.root = os.open(self.workspaces, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    # -- the server's socket ----------------------------------------------------------

    def serve(self, sock: socket.socket) -> None:
        while True:
            try:
                message, fds = recv_packet(sock)
            except WireError as exc:
                if str(exc) == "closed":
                    return
                log.warning("broker: bad request dropped (%s)", exc)
                continue
            except OSError:
                return
            threading.Thread(target=self._answer, args=(sock, message, fds), daemon=True).start()

    def _answer(self, sock: socket.socket, message: dict, fds: list[int]) -> None:
        reply, out_fds = {"id": message.get("id")}, []
        try:
            if message.get("op") == "cli":
                result, out_fds = self.cli(message, fds)
                fds = []  # the gateway's socket is kept with the ticket
            elif message.get("op") in ("git", "bash"):
                handler = self.git if message["op"] == "git" else self.bash
                result, out_fds = handler(message, fds)
            else:
                handler = {"workspace": self.workspace, "host": self.host,
                           "selftest": self.selftest}.get(message.get("op"))  # fmt: skip
                if handler is None:
                    raise Refused("unknown request")
                result, out_fds = handler(message)
            reply.update(ok=True, **result)
        except (Refused, bash_spawn.Refused, cli_spawn.Refused, git_spawn.Refused,
                project_mounts.Refused, egress_socket.Refused) as exc:  # fmt: skip
            reply.update(ok=False, error=str(exc))
        except Exception as exc:  # an operator's problem (mkfs, mount): said, not hidden
            log.exception("broker: %s failed", message.get("op"))
            reply.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:500])
        finally:
            for fd in fds:  # the server sends none; any that came are not kept
                os.close(fd)
        try:
            with self.send_lock:
                send_packet(sock, reply, out_fds)
        except OSError:
            pass
        finally:
            for fd in out_fds:
                os.close(fd)

    # -- requests ---------------------------------------------------------------------

    def workspace(self, message: dict):
        from agent.sandbox.workspaces import prepare

        user = _user(message)
        return {"quota_mb": prepare(self.workspaces, user, self.config.ids(user))}, []

    def _workspace_fd(self, user: int) -> int:
        try:
            fd = os.open(str(user), os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=self.root)  # fmt: skip
        except FileNotFoundError:
            raise Refused("the workspace is not prepared") from None
        st = os.fstat(fd)
        if (st.st_uid, st.st_gid) != self.config.ids(user):
            os.close(fd)
            raise Refused("the workspace does not belong to its user")
        return fd

    def _need_bwrap(self) -> str:
        if self.bwrap is None:
            raise Refused("bubblewrap (bwrap) is not installed")
        return self.bwrap

    def host(self, message: dict):
        user = _user(message)
        bwrap = self._need_bwrap()
        workspace = self._workspace_fd(user)
        projects = None
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            projects = project_mounts.projects_fd(workspace)
            argv = host_argv(bwrap, self.config, workspace, theirs.fileno(), self.config.ids(user))
            at = argv.index("--")
            argv[at:at] = project_mounts.host_binds(projects)
            child, cgroup = self.spawn(
                user,
                argv,
                [workspace, projects, theirs.fileno()],
                nofile=HOST_NOFILE,
                stdout=subprocess.DEVNULL,
            )
        except BaseException:
            mine.close()
            raise
        finally:
            os.close(workspace)
            if projects is not None:
                os.close(projects)
            theirs.close()
        # It ends when the server closes its socket; then its cgroup goes.
        threading.Thread(target=self.supervise, args=(child, cgroup), daemon=True).start()
        return {}, [mine.detach()]

    def bash(self, message: dict, fds: list[int]):
        """One command; ``fds``: none, or the egress proxy's socket (its only route out)."""
        child, cgroup, read, measure = bash_spawn.start(self, _user(message), message, fds)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        threading.Thread(target=self._watch, args=(child, mine, cgroup, measure),
                         daemon=True).start()  # fmt: skip
        return {}, [read, theirs.detach()]

    def git(self, message: dict, fds: list[int]):
        """A push of a project's repository, as its owner, in their sandbox; the network
        only through the relay's socket (the one descriptor sent). Clones are the file
        host's (agent/sandbox/host_clone.py)."""
        user = _user(message)
        workspace = self._workspace_fd(user)
        try:
            # (the projects stay: git works on one of them; the CLI homes do not)
            hide = cli_spawn.hidden_homes() if cli_spawn.has_homes(workspace) else []
            child, cgroup, read = git_spawn.start(self, user, message, fds, workspace, hide)
            measure = os.dup(workspace)
        finally:
            os.close(workspace)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        threading.Thread(target=self._watch, args=(child, mine, cgroup, measure),
                         daemon=True).start()  # fmt: skip
        return {}, [read, theirs.detach()]

    def selftest(self, message: dict):
        """One command through the real spawn path, as a uid no user has (users start at
        BASE + 1), in a directory of its own: what /healthz reports."""
        bwrap = self._need_bwrap()
        uid = self.config.uid_base
        directory = tempfile.mkdtemp(prefix="harness-selftest-")
        try:
            os.chown(directory, uid, uid)
            fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            read, write = os.pipe2(os.O_CLOEXEC)
            try:
                argv = sandbox_argv(bwrap, fd, f"echo {SELFTEST_WORD}", (uid, uid))
                child = self._start(argv, [fd], limits(None, self.config.pids), stdout=write)
            finally:
                os.close(write)
                os.close(fd)
            with os.fdopen(read, "rb") as out:
                said = out.read(4096).decode(errors="replace")
            try:
                code = child.wait(SELFTEST_SECONDS)
            except subprocess.TimeoutExpired:
                _kill(child)
                code = child.wait()
            self._forget(child)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        return {"exit": code, "output": said[:500]}, []

    def cli(self, message: dict, fds: list[int]):
        """A CLI agent's sandbox, to be started by the pane that presents the ticket."""
        user = _user(message)
        spec = cli_spawn.validate(message, fds, self.config)  # refused: the caller closes the fds
        spec["user"] = user
        ticket = secrets.token_urlsafe(24)
        with self.lock:
            now = time.monotonic()
            for key, (expires, old) in list(self.tickets.items()):
                if expires < now:
                    del self.tickets[key]
                    cli_spawn.close_fds(old)
            self.tickets[ticket] = (now + TICKET_SECONDS, spec)
        return {"ticket": ticket}, []

    def take_ticket(self, ticket) -> dict | None:
        with self.lock:
            found = self.tickets.pop(ticket, None) if isinstance(ticket, str) else None
        return found[1] if found and found[0] >= time.monotonic() else None

    def start_cli(self, spec: dict, stdio: list[int]):
        return cli_spawn.start(self, spec, stdio)

    # -- processes --------------------------------------------------------------------

    def spawn(self, user: int, argv: list[str], pass_fds: list[int], *, nofile: int | None = None,
              address_space: int = MEMORY_LIMIT, **popen):  # fmt: skip
        """The one way a user's process starts: in a new cgroup of the user's (processes,
        memory), with rlimits (the process limit only where no pids cgroup binds)."""
        cgroup = self.cgroups.open_run(f"{self.workspaces}/{user}")
        try:
            pids_by_cgroup = cgroup is not None and "pids" in cgroup.controllers
            nproc = None if pids_by_cgroup else self.config.pids
            child = self._start(argv, pass_fds, limits(cgroup, nproc, nofile, address_space),
                                **popen)  # fmt: skip
        except BaseException:
            if cgroup is not None:
                self.cgroups.release_sync(cgroup)
            raise
        return child, cgroup

    def _start(self, argv, pass_fds, preexec, stdout, stdin=subprocess.DEVNULL, stderr=None,
               cwd="/", env=None):  # fmt: skip
        # Forked from the one thread that lives as long as the broker: bwrap's
        # --die-with-parent (PR_SET_PDEATHSIG) fires when the forking *thread* ends, and a
        # request's thread ends as soon as it has answered.
        child = self._spawner.submit(
            subprocess.Popen, argv, stdin=stdin, stdout=stdout,
            stderr=subprocess.STDOUT if stderr is None else stderr,
            env=dict(env or SPAWN_ENV), pass_fds=pass_fds, preexec_fn=preexec,
            start_new_session=True, cwd=cwd,
        ).result()  # fmt: skip
        with self.lock:
            self.children.add(child)
        return child

    def _forget(self, child: subprocess.Popen) -> None:
        with self.lock:
            self.children.discard(child)

    def supervise(self, child: subprocess.Popen, cgroup, control: socket.socket | None = None):
        """Every process the broker starts for a user ends here: when it exits, or when the
        other end of ``control`` says kill or goes away (a timeout, a cancel, a closed
        pane). Then whatever it left is killed, its cgroup removed; (status, what the
        kernel counted)."""
        stop = threading.Event()

        def listen() -> None:
            with contextlib.suppress(OSError, WireError):
                recv_packet(control)  # a "kill", or EOF
            if not stop.is_set():
                _kill(child)

        if control is not None:
            threading.Thread(target=listen, daemon=True).start()
        code = child.wait()
        stop.set()
        _kill(child)
        stats = self.cgroups.release_sync(cgroup) if cgroup is not None else None
        self._forget(child)
        return code, stats

    def _watch(self, child: subprocess.Popen, control: socket.socket, cgroup,
               workspace: int) -> None:  # fmt: skip
        """One bash call, supervised; its exit status, what the kernel counted and the
        workspace's disk go back on ``control``."""
        code, stats = self.supervise(child, cgroup, control)
        reply = {"exit": code, "oom_kills": stats.oom_kills if stats else 0,
                 "pids_hits": stats.pids_limit_hits if stats else 0}  # fmt: skip
        try:
            reply["disk"] = list(disk_usage(os.fstatvfs(workspace)))
        except OSError:
            pass
        finally:
            os.close(workspace)
        with contextlib.suppress(OSError):
            send_packet(control, reply)
        control.close()

    def shutdown(self) -> None:
        with self.lock:
            children = list(self.children)
        for child in children:
            _kill(child)


def _kill(child: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s broker %(levelname)s %(message)s")
    control = socket.socket(fileno=int(sys.argv[1]))
    config = BrokerConfig(**json.load(sys.stdin))
    _configure_django(config)
    broker = Broker(config)
    if config.attach_socket:
        threading.Thread(target=cli_spawn.serve_attach, args=(broker,), daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        broker.serve(control)
    finally:
        broker.shutdown()
        if config.attach_socket:
            with contextlib.suppress(OSError):
                os.unlink(config.attach_socket)


def _configure_django(config: BrokerConfig) -> None:
    # storage.py reads these through django.conf.settings; the broker loads nothing else.
    from django.conf import settings

    settings.configure(
        HARNESS_WORKSPACES=Path(config.workspaces),
        HARNESS_WORKSPACE_STORAGE=config.storage,
        HARNESS_WORKSPACE_QUOTA_MB=config.quota_mb,
        VAR_DIR=Path(config.var_dir or config.workspaces),
        DATABASES={"default": {"ENGINE": "", "NAME": ""}},
    )


if __name__ == "__main__":
    main()
