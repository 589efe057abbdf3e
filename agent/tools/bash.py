"""bash: run a shell command in the workspace, by default inside a bubblewrap sandbox.

Sandbox (HARNESS_BASH=sandbox): only the workspace is writable (mounted at /workspace);
/usr is read-only; a handful of /etc files needed by programs, nothing else of the host
(no /home, /root, /var, no other workspaces, no database, no settings); fresh /tmp, /proc
and /dev; no network; a cleared environment (no API key, no secret key); its own pid
namespace, so everything it started dies with it. Resource limits: address space, file
size, processes. The process limit only binds a non-root uid, so a root server runs the
command as the workspace's owner (workspaces it creates belong to an unprivileged uid).
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
from collections.abc import Callable
from typing import Any

from .base import ParamError, ToolResult, fail, ok, require_str
from .process import run_process
from .workspace import Workspace

TIMEOUT = 120.0
OUTPUT_CAP = 100_000
MEMORY_LIMIT = 4 * 1024**3  # address space per process
FILE_SIZE_LIMIT = 1024**3
PROCESS_LIMIT = 256
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
# Host files that ordinary programs need; everything else under /etc stays hidden.
ETC_FILES = (
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/ssl/certs",
    "/etc/ca-certificates",
    "/etc/mime.types",
    "/etc/bash.bashrc",
    "/etc/profile",
    "/etc/inputrc",
    "/etc/debian_version",
    "/etc/os-release",
)

MODES = ("sandbox", "off", "unsafe")


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


SETPRIV = "/usr/bin/setpriv"


def sandbox_argv(
    bwrap: str, workspace_fd: int, command: str, run_as: tuple[int, int] | None = None
) -> list[str]:
    """The bwrap command line. ``run_as``: a root server's sandbox runs bwrap privileged
    (no user namespace, so it can mount what root can reach) and the command drops to this
    uid/gid first thing, with no_new_privs; its real uid is then unprivileged, which is what
    makes RLIMIT_NPROC bind. Otherwise bwrap makes a user namespace as the calling user."""
    argv = [bwrap, "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin", "lib32", "libx32"):
        target = os.path.realpath(f"/{name}")
        if target.startswith("/usr/"):
            argv += ["--symlink", target.removeprefix("/"), f"/{name}"]
    for path in ETC_FILES:
        if os.path.exists(path):
            argv += ["--ro-bind", path, path]
    argv += [
        # The workspace goes in as a descriptor opened by the server, so no path swap can
        # change what is mounted.
        "--bind-fd", str(workspace_fd), "/workspace",
        "--chdir", "/workspace",
        "--tmpfs", "/tmp",
        "--proc", "/proc",
        "--dev", "/dev",
    ]  # fmt: skip
    if run_as is None:
        argv += ["--unshare-all"]  # user, ipc, pid, net, uts, cgroup: no network
        inner = ["/bin/bash", "-c", command]
    else:
        uid, gid = run_as
        argv += [
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--cap-add",
            "CAP_SETUID",
            "--cap-add",
            "CAP_SETGID",
        ]
        inner = [SETPRIV, f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                 "--no-new-privs", "--", "/bin/bash", "-c", command]  # fmt: skip
    argv += [
        "--hostname", "sandbox",
        "--die-with-parent",
        "--new-session",  # no TIOCSTI into the server's terminal
        "--clearenv",
        "--setenv", "PATH", SANDBOX_PATH,
        "--setenv", "HOME", "/workspace",
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "TERM", "dumb",
        "--setenv", "TMPDIR", "/tmp",
        "--", *inner,
    ]  # fmt: skip
    return argv


def _process_count(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                count += entry.stat().st_uid == uid
    return count


def _limits(nproc: int) -> Callable[[], None]:
    def apply() -> None:  # runs in the child between fork and exec; inherited by all
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return apply


class BashTool:
    name = "bash"
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "The bash command to run"}},
        "required": ["command"],
    }

    def __init__(self, workspace: Workspace, mode: str = "sandbox", timeout: float = TIMEOUT):
        if mode not in ("sandbox", "unsafe"):
            raise ValueError(f"bash mode must be sandbox or unsafe, not {mode!r}")
        self.workspace = workspace
        self.mode = mode
        self.timeout = timeout
        where = (
            "in a sandbox: the workspace (at /workspace) is the only writable place, there is "
            "no network and no background process outlives the call"
            if mode == "sandbox"
            else "directly on the host (unsandboxed)"
        )
        self.description = (
            f"Run a bash command in the workspace, {where}. stdout and stderr are combined. "
            f"Limits: {int(timeout)} s timeout, 100 KB of output (the middle is cut), "
            "a non-zero exit status is an error."
        )

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        try:
            command = require_str(params, "command")
        except ParamError as exc:
            return fail(str(exc))
        root = str(self.workspace.root)
        if self.mode == "sandbox":
            bwrap = bwrap_path()
            if bwrap is None:
                return fail(
                    "bash is unavailable: the sandbox needs bubblewrap (`bwrap`), which is not "
                    "installed on the server. Install it, or set HARNESS_BASH=off."
                )
            run_as = None
            nproc = PROCESS_LIMIT
            if os.geteuid() == 0:
                st = os.stat(root)
                if st.st_uid != 0 and os.path.exists(SETPRIV):
                    run_as = (st.st_uid, st.st_gid)
            else:
                # The limit counts every process of this uid, not only the sandbox's.
                nproc += _process_count(os.getuid())
            workspace_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            argv = sandbox_argv(bwrap, workspace_fd, command, run_as)
            preexec = _limits(nproc)
            env = {"PATH": SANDBOX_PATH}
            pass_fds = [workspace_fd]
        else:
            argv, preexec, pass_fds = ["/bin/bash", "-c", command], None, []
            env = {"PATH": SANDBOX_PATH, "HOME": root, "LANG": "C.UTF-8", "TERM": "dumb"}
        try:
            result = await run_process(
                argv, env=env, timeout=self.timeout, output_cap=OUTPUT_CAP, cwd=root,
                merge_stderr=True, preexec_fn=preexec, pass_fds=pass_fds,
            )  # fmt: skip
        finally:
            for fd in pass_fds:
                os.close(fd)
        display = {
            "kind": "bash",
            "exit_code": result.returncode,
            "timed_out": result.timed_out,
            "truncated": result.truncated,
        }
        if result.timed_out:
            return fail(
                f"command timed out after {int(self.timeout)} s and was killed",
                display, output=result.output,
            )  # fmt: skip
        if result.returncode != 0:
            return fail(
                f"command exited with status {result.returncode}",
                display, exit_code=result.returncode, output=result.output,
            )  # fmt: skip
        return ok(display, exit_code=0, output=result.output)
