"""A user's file host: the file tools and the Files panel's reads and writes, run as the
user inside their sandbox (the workspace at /workspace, their projects at /projects,
nothing else of theirs writable), and the projects' git work (agent/core/projects), each
operation in a sandbox of its own showing only its project (agent/sandbox/project_workers.py),
and the clones that make projects (agent/sandbox/host_clone.py).

The broker starts it for a server that has dropped root; the server talks to it over one
socket (``wire`` frames, ``ops`` by name). A symlink, a race or a bug here reaches at most
what the user could reach anyway: the kernel checks every access as the user's.
"""

from __future__ import annotations

import concurrent.futures
import os
import socket
import threading

from agent.core.projects import MOUNT, PROJECTS_DIR
from agent.core.projects.layout import Layout
from agent.core.tools import build_tools
from agent.core.tools.workspace import PathError, Workspace
from agent.sandbox import host_clone, ops
from agent.sandbox.layout import HOMES
from agent.sandbox.project_workers import Workers
from agent.sandbox.wire import WireError, read_frame_fds, write_frame

THREADS = 4


def main(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    # The CLI homes live in the workspace's storage (its quota) but out of every tool's
    # and every other sandbox's reach; made here, as the user, before any sandbox runs.
    os.makedirs(f"/workspace/{HOMES}", mode=0o700, exist_ok=True)
    homes = Workspace(f"/workspace/{HOMES}")
    workspace = Workspace("/workspace")
    # The projects (their repositories, the conversations' worktrees) are reached at
    # /projects, where every sandbox that uses them shows them, never through here.
    workspace.hidden = (HOMES, PROJECTS_DIR)
    write_frame(sock, {"ready": True})  # the homes exist: sandboxes may start now
    scopes = {None: (workspace, {tool.name: tool for tool in build_tools(workspace, "off")})}
    lock = threading.Lock()
    projects = Workers()

    def scoped(scope) -> tuple[Workspace, dict]:
        """The workspace a request names: the user's own, or a conversation's worktree."""
        key = None if scope is None else tuple(scope)
        with lock:
            if key not in scopes:
                # [project]: its directory (an archive unpacked there); [project,
                # conversation]: the conversation's worktree.
                layout = Layout.of(MOUNT, *key)
                tree = layout.home if len(key) == 1 else layout.tree
                if len(scopes) > 64:  # a long-lived host: forget the oldest worktrees
                    scopes.pop(next(k for k in scopes if k is not None))
                worktree = Workspace(tree)
                scopes[key] = (worktree, {t.name: t for t in build_tools(worktree, "off")})
            return scopes[key]

    def answer(header: dict, blob: bytes, fds: list[int]) -> None:
        reply = {"id": header.get("id")}
        out = b""
        try:
            if header.get("op") == "git_clone":
                result = host_clone.clone(header.get("args"), fds)
            elif header.get("op") == "project":
                name, args = header.get("args")
                result, out = projects.run(name, args)
            else:
                root, tools = scoped(header.get("scope"))
                result, out = ops.run(root, tools, header.get("op"), header.get("args"), blob,
                                      homes)  # fmt: skip
            reply.update(ok=True, result=result)
        except Exception as exc:
            reply.update(ok=False, **ops.error_header(exc))
        finally:
            for fd in fds:
                os.close(fd)
        with lock:
            write_frame(sock, reply, out)

    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        while True:
            try:
                header, blob, fds = read_frame_fds(sock)
            except (WireError, OSError):
                return  # the server went away: so does the host
            if header.get("op") == "git_clone":
                # A clone holds its thread while git runs (minutes, maybe): not one of
                # the pool's, which the file operations need meanwhile.
                clone = threading.Thread(target=answer, args=(header, blob, fds), daemon=True)
                try:
                    clone.start()
                except RuntimeError:  # no thread to be had (the user's process bound)
                    for fd in fds:
                        os.close(fd)
                    cause = PathError("the file host could not start the clone")
                    refused = {"id": header.get("id"), "ok": False, **ops.error_header(cause)}
                    with lock:
                        write_frame(sock, refused)
            else:
                pool.submit(answer, header, blob, fds)
