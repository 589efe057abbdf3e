"""A bash command's process, for the broker: in the user's sandbox (their workspace, or
their conversation's worktree in a project, the CLI homes hidden), as their uid; behind the
egress proxy when its socket came with the request; or, with ``HARNESS_BASH=unsafe``, with
no sandbox around it but still as the user, never root."""

from __future__ import annotations

import os

from agent.core.tools.bwrap import SETPRIV, sandbox_argv
from agent.sandbox import cli_spawn, egress_socket, project_mounts
from agent.sandbox.spawn import SPAWN_ENV

MAX_COMMAND = 131072  # the kernel's limit on one argument (MAX_ARG_STRLEN)
UNSAFE_ENV = {"LANG": "C.UTF-8", "TERM": "dumb"}


class Refused(Exception):
    pass


def start(broker, user: int, message: dict, fds: list[int]):
    """The command started: its process, cgroup, the read end of its output and a
    descriptor of its workspace (where its disk is measured)."""
    command = message.get("command")
    if not isinstance(command, str) or len(command.encode()) > MAX_COMMAND:
        raise Refused("command must be a string of at most 128 KB")
    unsafe = message.get("unsafe") is True
    egress = egress_socket.checked(fds, broker.config.service_uid)
    if unsafe and egress is not None:
        raise Refused("an unsandboxed command has the host's network, not the proxy")
    bwrap = None if unsafe else broker._need_bwrap()
    workspace = broker._workspace_fd(user)
    worktree = None
    try:
        # A project conversation: its worktree is the workspace (project_mounts.py).
        worktree = project_mounts.requested(workspace, message)
        if worktree is not None:
            os.close(workspace)
            workspace = os.dup(worktree.tree)
        if unsafe:
            # HARNESS_BASH=unsafe: no sandbox around it, but still the user's uid (and
            # cgroup, limits), in the workspace: never root, never the server.
            uid, gid = broker.config.ids(user)
            argv = [SETPRIV, f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                    "--no-new-privs", "--", "/bin/bash", "-c", command]  # fmt: skip
            home = f"{broker.workspaces}/{user}"
            cwd, env = f"/proc/self/fd/{workspace}", {**SPAWN_ENV, **UNSAFE_ENV, "HOME": home}
        else:
            argv = sandbox_argv(bwrap, workspace, command, broker.config.ids(user),
                                egress=egress)  # fmt: skip
            at = argv.index("--")
            argv[at:at] = worktree.binds if worktree else cli_spawn.hidden_for(workspace)
            cwd, env = "/", None
        read, write = os.pipe2(os.O_CLOEXEC)
        passed = [workspace] + (worktree.fds if worktree is not None else [])
        passed += [egress] if egress is not None else []
        try:
            child, cgroup = broker.spawn(user, argv, passed, stdout=write, cwd=cwd, env=env)
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        # Kept for the watcher: the workspace's disk is measured where it is mounted.
        measure = os.dup(workspace)
    finally:
        os.close(workspace)
        if worktree is not None:
            worktree.close()
    return child, cgroup, read, measure
