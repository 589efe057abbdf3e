"""CLI agents through the broker: the server asks for a ticket (``cli``); the tmux pane's
first process (``attach``) presents it with the pane's terminal, and the broker starts the
CLI's sandbox as the user, in their cgroup, on that terminal.

What the server may name is checked here: the conversation (its home's name), the program
(a shell command run as the user, in the sandbox), the environment, and the CLI's install
directory, which must be root's and closed to everyone else all the way up (it is bound
read-only into a user's sandbox). The CLI's home is opened from the workspace's descriptor
one component at a time, never through a link, and the other conversations' homes are
hidden under an empty tmpfs. The model gateway's socket comes as a descriptor the server
opened itself: it can hand over nothing it could not open.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import stat
import struct
import subprocess
import threading
from pathlib import Path

from agent.core.cli_agents.session import HOME_IN_SANDBOX, cli_sandbox, install_binds
from agent.core.tools.bwrap import sandbox_argv
from agent.sandbox import egress_socket, preview_mounts, project_mounts
from agent.sandbox.layout import HOMES
from agent.sandbox.spawn import CLI_ADDRESS_SPACE
from agent.sandbox.wire import WireError, recv_packet, send_packet

GATEWAY_IN_SANDBOX = "/harness-llm"  # agent/runs/llm_gateway.py's DIR_IN_SANDBOX
CONVERSATION = re.compile(r"^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,63}$")
MAX_PROGRAM = 131072


class Refused(Exception):
    pass


def validate(message: dict, fds: list[int], config) -> dict:
    conversation = message.get("conversation")
    if not isinstance(conversation, str) or not CONVERSATION.match(conversation):
        raise Refused("conversation must be a UUID")
    program = message.get("program")
    if not isinstance(program, str) or len(program.encode()) > MAX_PROGRAM:
        raise Refused("program must be a string of at most 128 KB")
    env = message.get("env") or {}
    if (not isinstance(env, dict) or len(env) > 64
            or not all(isinstance(k, str) and ENV_NAME.match(k) and isinstance(v, str)
                       and len(v) < 4096 for k, v in env.items())):  # fmt: skip
        raise Refused("env must map up to 64 NAMEs to short strings")
    root = message.get("cli_root")
    if root is not None:
        if root not in config.cli_roots:
            raise Refused("the CLI's directory is not one this deployment configured")
        root = closed_to_others(root)
    # The gateway's socket, then the egress proxy's when ``egress`` says one came, then
    # the previews' directory when ``preview`` says so.
    egress = message.get("egress") is True
    preview = message.get("preview", False)
    if not isinstance(preview, bool):
        raise Refused("preview must be true or false")
    if (egress and len(fds) < 1 + preview) or len(fds) < preview:
        raise Refused("a descriptor the request names is missing")
    rest = list(fds)
    preview_fd = rest.pop() if preview else None
    if preview_fd is not None:
        preview_directory(preview_fd, config)
    gateway, sockets = (rest[:-1], rest[-1:]) if egress else (rest, [])
    if len(gateway) > 1:
        raise Refused("at most one descriptor: the gateway's socket")
    if gateway and not stat.S_ISSOCK(os.fstat(gateway[0]).st_mode):
        raise Refused("the descriptor is not a socket")
    try:
        egress_fd = egress_socket.checked(sockets, config.service_uid)
    except egress_socket.Refused as exc:
        raise Refused(str(exc)) from None
    project = message.get("project")
    if project is not None and not (isinstance(project, str) and CONVERSATION.match(project)):
        raise Refused("project must be a UUID")
    return {"conversation": conversation.replace("-", ""), "program": program, "env": env,
            "cli_root": root, "project": project, "gateway_fd": gateway[0] if gateway else None,
            "egress_fd": egress_fd, "preview_fd": preview_fd}  # fmt: skip


def close_fds(spec: dict) -> None:
    """The descriptors a ticket kept (the gateway's and the egress proxy's sockets, the
    previews' directory)."""
    for name in ("gateway_fd", "egress_fd", "preview_fd"):
        if spec.get(name) is not None:
            os.close(spec[name])


def preview_directory(fd: int, config) -> None:
    """The previews' directory (agent/runs/previews.py) is one the server made for itself:
    bound writable into the user's sandbox, it must be nothing else of the host's."""
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != config.service_uid:
        raise Refused("the preview directory is not a directory of the server's")


def closed_to_others(path: str) -> str:
    """``path`` resolved, when it and every directory above it are root's and nobody else
    may change them (a sticky directory's own entries excepted): then what is bound is
    what root installed."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise Refused("the CLI's directory must be an absolute path")
    real = Path(os.path.realpath(path))
    if not real.is_dir():
        raise Refused("the CLI's directory does not exist")
    for directory in [real, *real.parents]:
        st = os.stat(directory)
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if st.st_uid != 0 or (writable and not (st.st_mode & stat.S_ISVTX and directory != real)):
            raise Refused(f"the CLI's directory {real} is not closed to all but root")
    return str(real)


def open_home(workspace_fd: int, conversation: str) -> int:
    """The conversation's CLI home, as made by the user's file host: real directories all
    the way, on the workspace's own file system."""
    device = os.fstat(workspace_fd).st_dev
    fd = workspace_fd
    opened = []
    try:
        for name in (HOMES, conversation):
            try:
                fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                             dir_fd=fd)  # fmt: skip
            except OSError:
                raise Refused("the CLI's home is missing or not a directory") from None
            opened.append(fd)
            if os.fstat(fd).st_dev != device:
                raise Refused("the CLI's home is not on the workspace's file system")
        return opened.pop()
    finally:
        for other in opened:
            os.close(other)


def argv(bwrap: str, spec: dict, workspace_fd: int, home_fd: int, gateway_fd: int | None,
         ids: tuple[int, int], forwarder: str, worktree=None,
         egress_fd: int | None = None, preview_fd: int | None = None) -> list[str]:  # fmt: skip
    # In a project conversation the workspace is its worktree (no homes in it to hide).
    binds = (worktree.binds if worktree is not None else hidden_for(workspace_fd)) + [
        "--perms", "0755", "--dir", "/home",
        "--bind-fd", str(home_fd), HOME_IN_SANDBOX,
        *install_binds(spec["cli_root"]),
    ]  # fmt: skip
    if gateway_fd is not None:
        binds += ["--perms", "0755", "--dir", GATEWAY_IN_SANDBOX,
                  "--perms", "0755", "--dir", f"{GATEWAY_IN_SANDBOX}/socket",
                  "--ro-bind-fd", str(gateway_fd), f"{GATEWAY_IN_SANDBOX}/socket/s",
                  "--ro-bind", forwarder, f"{GATEWAY_IN_SANDBOX}/forwarder.js"]  # fmt: skip
    if preview_fd is not None:
        binds += preview_mounts.binds(["--bind-fd", str(preview_fd)])
    base = sandbox_argv(bwrap, workspace_fd, spec["program"], ids, egress=egress_fd)
    return cli_sandbox(base, binds, spec["env"])


def hidden_for(workspace_fd: int) -> list[str]:
    """What a sandbox of the user's own workspace must not see: the CLI homes (when made)
    and the projects."""
    binds = hidden_homes() if has_homes(workspace_fd) else []
    if project_mounts.has_projects(workspace_fd):
        binds += project_mounts.hidden()
    return binds


def has_homes(workspace_fd: int) -> bool:
    try:
        fd = os.open(HOMES, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=workspace_fd)  # fmt: skip
    except OSError:
        return False
    os.close(fd)
    return True


def hidden_homes() -> list[str]:
    """Every sandbox sees an empty, unchangeable HOMES: one conversation's code cannot read
    or plant files in another conversation's CLI home."""
    return ["--tmpfs", f"/workspace/{HOMES}", "--remount-ro", f"/workspace/{HOMES}"]


# -- the panes' side ------------------------------------------------------------------


def serve_attach(broker) -> None:
    path = broker.config.attach_socket
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    os.chown(path, 0, broker.config.service_gid)
    os.chmod(path, 0o660)
    listener.listen(64)
    while True:
        conn, _ = listener.accept()
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", creds)
        if uid not in (0, broker.config.service_uid):
            conn.close()
            continue
        threading.Thread(target=attach, args=(broker, conn), daemon=True).start()


def attach(broker, conn: socket.socket) -> None:
    """One pane: its ticket, its terminal; the CLI runs until it exits or the pane goes."""
    fds: list[int] = []
    spec = None
    try:
        message, fds = recv_packet(conn)
        spec = broker.take_ticket(message.get("ticket"))
        if spec is None or len(fds) != 3:
            send_packet(conn, {"ok": False, "error": "no such ticket"})
            return
        child, cgroup = broker.start_cli(spec, fds)
    except Exception as exc:  # noqa: BLE001 - told to the pane, which shows it
        with contextlib.suppress(OSError, WireError):
            send_packet(conn, {"ok": False, "error": str(exc)[:500]})
        return
    finally:
        for fd in fds:
            os.close(fd)
        if spec is not None:
            close_fds(spec)
    send_packet(conn, {"ok": True})
    code, _ = broker.supervise(child, cgroup, conn)  # the pane gone: the CLI goes too
    with contextlib.suppress(OSError):
        send_packet(conn, {"exit": code})
    conn.close()


def start(broker, spec: dict, stdio: list[int]) -> tuple[subprocess.Popen, object]:
    user = spec["user"]
    workspace = broker._workspace_fd(user)
    home = worktree = None
    try:
        home = open_home(workspace, spec["conversation"])
        root = workspace
        if spec.get("project"):
            worktree = project_mounts.requested(workspace, spec)
            root = worktree.tree
        forwarder = os.path.join(broker.config.app, "agent", "runs", "llm_forwarder.js")
        command = argv(broker._need_bwrap(), spec, root, home, spec.get("gateway_fd"),
                       broker.config.ids(user), forwarder, worktree,
                       spec.get("egress_fd"), spec.get("preview_fd"))  # fmt: skip
        passed = [workspace, home] + [spec[name]
                                      for name in ("gateway_fd", "egress_fd", "preview_fd")
                                      if spec.get(name) is not None]  # fmt: skip
        passed += worktree.fds if worktree is not None else []
        return broker.spawn(user, command, passed, address_space=CLI_ADDRESS_SPACE,
                            stdin=stdio[0], stdout=stdio[1], stderr=stdio[2])  # fmt: skip
    finally:
        os.close(workspace)
        if home is not None:
            os.close(home)
        if worktree is not None:
            worktree.close()
