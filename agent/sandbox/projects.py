"""Run a project operation (agent/core/projects/ops.py) as the project's owner, inside
their sandbox: the reusable seam for every git command on a user's repositories.

Under a broker the user's file host runs it (``UserSandbox.project``); a server without
one (print mode, a root server's tests, an unprivileged development server) starts a
one-shot sandbox of the same shape: the projects directory at ``/projects``, the agent
package read-only, the interpreter on its standard library only, as the owner's uid.
Either way git never runs in the server's process, and never as the server's user when
the server is root; and each operation's sandbox shows only the project (or the
conversation) it is about (``open_view``): a link an agent swaps in while it runs leads
nowhere it could not go itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agent.core.git import GitError
from agent.core.projects import ops as project_ops
from agent.core.projects.layout import LayoutError
from agent.core.tools.bwrap import SANDBOX_PATH, bwrap_path, sandbox_argv
from agent.sandbox import ops, project_mounts
from agent.sandbox.spawn import APP_IN_SANDBOX, limits, parent_dirs

TIMEOUT = 300.0
OUTPUT_CAP = 64 * 1024 * 1024
APP = str(Path(__file__).resolve().parents[2])  # the directory holding ``agent``


def run(sandbox, workspace_root: str, ids: tuple[int, int] | None, name: str,
        args: dict) -> tuple[dict, bytes]:  # fmt: skip
    """Blocking: (JSON result, bytes). ``sandbox``: the user's ``UserSandbox`` under a
    broker, else None; ``workspace_root``: the user's workspace (its projects directory is
    opened from it); ``ids``: the uid and gid a root server runs the sandbox as."""
    if sandbox is not None:
        return sandbox.project(name, args)
    return oneshot(workspace_root, ids, name, args)


def _python() -> tuple[str, str]:
    python = os.path.realpath(sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    if not python.startswith(prefix + "/"):
        python = os.path.join(prefix, "bin", f"python{sys.version_info[0]}")
    return python, prefix


def command(bwrap: str, view: project_mounts.Worktree, ids: tuple[int, int] | None,
            code: str, proc: bool = True) -> list[str]:  # fmt: skip
    """The sandbox of one project operation (or of a file host's worker for one scope):
    ``view`` (project_mounts.open_operation) is all it sees of the user's files; the
    interpreter runs ``code`` on its standard library and the agent package, read-only."""
    python, prefix = _python()
    program = [python, "-I", "-S", "-B", "-c",
               f"import sys; sys.path.insert(0, {APP_IN_SANDBOX!r}); {code}"]  # fmt: skip
    argv = sandbox_argv(bwrap, view.tree, "", ids, program=program, proc=proc)
    at = argv.index("--")
    argv[at:at] = parent_dirs(prefix + "/x") + [
        "--ro-bind", prefix, prefix,
        "--perms", "0755", "--dir", "/opt",
        "--perms", "0755", "--dir", APP_IN_SANDBOX,
        "--ro-bind", os.path.join(APP, "agent"), APP_IN_SANDBOX + "/agent",
        *view.binds,
    ]  # fmt: skip
    return argv


def open_view(workspace_fd: int, name: str, args: dict,
              ids: tuple[int, int] | None) -> project_mounts.Worktree:  # fmt: skip
    """What the sandbox of operation ``name`` on ``args`` sees (GitError when refused)."""
    try:
        if name in project_ops.WHOLE:
            projects = project_mounts.projects_fd(workspace_fd)
            again = os.dup(projects)  # its second mount: bwrap closes a descriptor once used
            return project_mounts.Worktree(projects, project_mounts.host_binds(again),
                                           [projects, again])  # fmt: skip
        project, conversation = project_ops.scope(name, args)
        return project_mounts.open_operation(workspace_fd, project, conversation, ids)
    except (project_mounts.Refused, LayoutError) as exc:
        raise GitError(str(exc)) from None


def oneshot(workspace_root: str, ids: tuple[int, int] | None, name: str,
            args: dict) -> tuple[dict, bytes]:  # fmt: skip
    bwrap = bwrap_path()
    if bwrap is None:
        raise GitError("projects need the sandbox: bubblewrap (bwrap) is not installed")
    workspace = os.open(workspace_root, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        view = open_view(workspace, name, args, ids)
    finally:
        os.close(workspace)
    try:
        argv = command(bwrap, view, ids, "from agent.sandbox.project_oneshot import main; main()")
        request = json.dumps({"name": name, "args": args}).encode()
        try:
            done = subprocess.run(argv, input=request, capture_output=True, timeout=TIMEOUT,
                                  pass_fds=view.fds, env={"PATH": SANDBOX_PATH},
                                  preexec_fn=limits(None, None))  # fmt: skip
        except subprocess.TimeoutExpired:
            raise GitError(f"the project operation did not finish within {TIMEOUT:g} s") from None
    finally:
        view.close()
    header, _, blob = done.stdout[:OUTPUT_CAP].partition(b"\n")
    try:
        reply = json.loads(header)
    except ValueError:
        said = done.stderr.decode(errors="replace").strip()[-500:]
        raise GitError(f"the project's sandbox failed ({done.returncode}): {said}") from None
    if not reply.get("ok"):
        raise ops.error_of(reply)
    return ops.result_of("project", reply.get("result"), blob)
