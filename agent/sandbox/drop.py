"""A server started as root: start the broker, then become the service user before serving.

``start()`` runs once, at the ASGI application's import (Daphne, ``runserver``, the unit,
the container all come through it), while the process has one thread:

1. the broker starts (``python -m agent.sandbox.broker``), root, with a socket only this
   process holds, and the configuration it will ever use;
2. the server's own state (``var/``, the SQLite database, the CLI agents' state) becomes
   the service user's: its directories writable by the service group, with the sticky bit, so the
   server writes its files there but cannot rename or replace the broker's (the
   workspaces); the files it writes are given to it;
3. what the server must read but the service user cannot reach (a checkout or an
   interpreter under a 0700 home) is made visible in a mount namespace of the server's own,
   by covering each closed directory on the way with an empty tmpfs holding just the
   needed entries (bind mounts): nothing else of it appears;
4. the process sets its groups, gid and uid to the service user's, for good.

The kernel then refuses the server every file of a user's workspace, the CLI homes, other
users' processes and everything root's: those acts go to the broker.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import logging
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from agent.sandbox.client import Broker
from agent.sandbox.spawn import BrokerConfig

log = logging.getLogger(__name__)

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_SLAVE = 2, 4, 4096, 16384, 1 << 19
_libc = ctypes.CDLL(None, use_errno=True)
_broker: Broker | None = None


def broker() -> Broker | None:
    """This process's broker, once the server has dropped root; None otherwise."""
    return _broker


IN_PROCESS = "HARNESS_IN_PROCESS"  # set by the test suite: it imports the app, serves nothing


def start() -> Broker | None:
    global _broker
    if os.geteuid() != 0 or _broker is not None or os.environ.get(IN_PROCESS) == "1":
        return _broker
    if threading.active_count() != 1:
        raise ImproperlyConfigured("the server must drop root before it starts a thread")
    account = service_account()
    uid, gid = account.pw_uid, account.pw_gid
    config = broker_config(uid, gid)
    # The state directories first: the broker binds the panes' socket in one of them as it
    # starts (made after it, the bind lost the race now and then, and no pane could attach).
    give_state(uid, gid)
    client = start_broker(config)
    # The workspaces' root is the broker's; the server passes through it (no further).
    workspaces = Path(settings.HARNESS_WORKSPACES)
    workspaces.mkdir(parents=True, exist_ok=True)
    os.chmod(workspaces, 0o711)
    expose(uid, gid, needed_paths())
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if 0 in os.getresuid() or 0 in os.getresgid():
        raise RuntimeError("the server could not drop root")
    log.info("server runs as %s (uid %d); its broker keeps root", account.pw_name, uid)
    _broker = client
    return client


def service_account() -> pwd.struct_passwd:
    name = settings.HARNESS_SERVICE_USER
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    useradd = shutil.which("useradd", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if useradd is None:
        raise ImproperlyConfigured(
            f"the service user {name!r} does not exist and useradd is missing: create it "
            "(a system account with no login) or set HARNESS_SERVICE_USER"
        )
    subprocess.run([useradd, "--system", "--user-group", "--no-create-home", "--home-dir",
                    "/nonexistent", "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)  # fmt: skip
    log.info("created the service user %s", name)
    return pwd.getpwnam(name)


def broker_config(uid: int, gid: int) -> BrokerConfig:
    python = os.path.realpath(sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    if not python.startswith(prefix + "/"):
        python = os.path.join(prefix, "bin", f"python{sys.version_info[0]}")
    return BrokerConfig(
        service_uid=uid, service_gid=gid, uid_base=settings.HARNESS_SANDBOX_UID_BASE,
        workspaces=str(Path(settings.HARNESS_WORKSPACES).resolve()),
        storage=settings.HARNESS_WORKSPACE_STORAGE, quota_mb=settings.HARNESS_WORKSPACE_QUOTA_MB,
        var_dir=str(settings.VAR_DIR), pids=settings.HARNESS_SANDBOX_PIDS,
        memory_mb=settings.HARNESS_SANDBOX_MEMORY_MB, cgroups=settings.HARNESS_SANDBOX_CGROUPS,
        cgroup_path=settings.HARNESS_CGROUP or "", python_prefix=prefix, python=python,
        app=str(settings.BASE_DIR),
        attach_socket=str(attach_socket()), cli_roots=cli_roots(),
    )  # fmt: skip


def cli_roots() -> list[str]:
    """The CLI agents' install directories, as the deployment configures them: the only
    ones the broker will bind into a user's sandbox."""
    from agent.core.cli_agents.providers import PROVIDERS
    from agent.core.cli_agents.session import install_root

    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for name, command in settings.HARNESS_AGENT_COMMANDS.items():
        if command:
            environ[PROVIDERS[name].command_env_name()] = command
    found = (provider.find(environ) for provider in PROVIDERS.values())
    return sorted({root for exe in found if exe and (root := install_root(exe)) is not None})


def attach_socket() -> Path:
    """Where the tmux panes reach this server's broker (agent/sandbox/attach.py)."""
    return Path(settings.HARNESS_AGENT_STATE).resolve() / f"broker-{os.getpid()}.sock"


def start_broker(config: BrokerConfig) -> Broker:
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    app = str(settings.BASE_DIR)
    process = subprocess.Popen(
        [sys.executable, "-m", "agent.sandbox.broker", str(theirs.fileno())],
        stdin=subprocess.PIPE, pass_fds=[theirs.fileno()], cwd=app,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": app,
             "LANG": "C.UTF-8"},
    )  # fmt: skip
    theirs.close()
    process.stdin.write(json.dumps(dataclasses.asdict(config)).encode())
    process.stdin.close()
    return Broker(mine)


# -- the server's own state ------------------------------------------------------------


def state_dirs() -> list[Path]:
    dirs = [Path(settings.VAR_DIR), Path(settings.HARNESS_AGENT_STATE)]
    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        dirs.append(Path(str(database["NAME"])).parent)
    return [d.resolve() for d in dirs]


def give_state(uid: int, gid: int) -> None:
    """The server writes in its state directories (sticky, group-writable: it cannot move
    or replace what it does not own, such as the broker's workspaces or the installed CLI
    agents) and is given the files it keeps there: the SQLite database, the CLI sessions'
    logs. Nothing else changes hands."""
    for directory in state_dirs():
        directory.mkdir(parents=True, exist_ok=True)
        st = os.stat(directory)
        if st.st_mode & stat.S_IWOTH and st.st_mode & stat.S_ISVTX:
            continue  # a shared scratch directory (/tmp): the server may write there already
        # The group's write and the sticky bit added, its owner kept (unless it is the
        # service user, who could then move anything in it): the server creates its files
        # there and cannot move or replace anyone else's, such as the broker's workspaces.
        os.chown(directory, 0 if st.st_uid == uid else st.st_uid, gid)
        os.chmod(directory, stat.S_IMODE(st.st_mode) | stat.S_ISVTX | stat.S_IRWXG)
    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        name = str(database["NAME"])
        for path in (name, f"{name}-wal", f"{name}-shm", f"{name}-journal"):
            if os.path.lexists(path):
                _give_tree(Path(path), uid, gid)
    state = Path(settings.HARNESS_AGENT_STATE)
    if (state / "sessions").is_dir():
        _give_tree(state / "sessions", uid, gid)
    socket_path = state / "tmux.sock"
    # A root tmux server's (or anyone else's) ends: ours starts anew. The service user's,
    # left by the server before this one, stays: its sessions (the Terminal panel's shells'
    # screens, a CLI's until the orphan scan ends it) outlive a restart.
    if os.path.lexists(socket_path) and os.lstat(socket_path).st_uid != uid:
        _end_tmux(socket_path)


def _give_tree(path: Path, uid: int, gid: int) -> None:
    """chown a tree by descriptors, never following a link, never crossing a mount."""
    st = os.lstat(path)
    os.chown(path, uid, gid, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        return
    for _, dirnames, filenames, dirfd in os.fwalk(path, follow_symlinks=False):
        if os.fstat(dirfd).st_dev != st.st_dev:
            dirnames.clear()
            continue
        for name in dirnames + filenames:
            with contextlib.suppress(FileNotFoundError):
                os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)


def _end_tmux(socket_path: Path) -> None:
    tmux = shutil.which("tmux")
    if tmux:
        subprocess.run([tmux, "-S", str(socket_path), "kill-server"], capture_output=True,
                       check=False, timeout=10)  # fmt: skip
    with contextlib.suppress(FileNotFoundError):
        socket_path.unlink()


# -- what the server reads -------------------------------------------------------------


def needed_paths() -> list[Path]:
    paths = {
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(settings.BASE_DIR),
        *state_dirs(),
        Path(settings.HARNESS_WORKSPACES),
    }
    paths.update(Path(p) for p in sys.path if p and os.path.isdir(p))
    return sorted({p.resolve() for p in paths})


def _searchable(st: os.stat_result, uid: int, gid: int) -> bool:
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def closed_directory(paths: list[Path], uid: int, gid: int) -> Path | None:
    """The shallowest directory on the way to one of ``paths`` the user cannot pass."""
    for path in paths:
        for directory in [*reversed(path.parents), path]:
            if not _searchable(os.stat(directory), uid, gid):
                return directory
    return None


def expose(uid: int, gid: int, paths: list[Path]) -> None:
    if closed_directory(paths, uid, gid) is None:
        return
    if _libc.unshare(CLONE_NEWNS) != 0 or _mount(None, "/", None, MS_REC | MS_SLAVE) != 0:
        raise ImproperlyConfigured(
            "the server cannot reach its code or state as the service user, and cannot "
            f"make a mount namespace to show them ({os.strerror(ctypes.get_errno())}): "
            "install it where the service user can read it"
        )
    for _ in range(64):  # each pass opens one directory; a path has fewer levels
        closed = closed_directory(paths, uid, gid)
        if closed is None:
            return
        _cover(closed, paths)
    raise ImproperlyConfigured("could not make the server's code and state visible to it")


def _cover(directory: Path, paths: list[Path]) -> None:
    """An empty tmpfs over ``directory`` holding only the entries ``paths`` go through."""
    names = sorted({p.relative_to(directory).parts[0] for p in paths
                    if p != directory and directory in p.parents})  # fmt: skip
    if any(p == directory for p in paths):
        raise ImproperlyConfigured(f"the service user cannot enter {directory}")
    fds = {name: os.open(directory / name, os.O_PATH | os.O_CLOEXEC) for name in names}
    try:
        mode = "mode=0755,size=64k"
        if _mount("tmpfs", str(directory), "tmpfs", MS_NOSUID | MS_NODEV, mode) != 0:
            raise OSError(ctypes.get_errno(), f"mount tmpfs on {directory}")
        for name, fd in fds.items():
            target = directory / name
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                target.mkdir()
            else:
                target.touch()
            if _mount(f"/proc/self/fd/{fd}", str(target), None, MS_BIND | MS_REC) != 0:
                raise OSError(ctypes.get_errno(), f"bind {name} into {directory}")
    finally:
        for fd in fds.values():
            os.close(fd)


def _mount(source, target, fstype, flags, data=None) -> int:
    encode = lambda s: None if s is None else s.encode()  # noqa: E731
    return _libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data))
