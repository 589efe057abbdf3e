"""bash: run a shell command in the workspace, by default inside a bubblewrap sandbox.

Sandbox (HARNESS_BASH=sandbox): only the workspace is writable (mounted at /workspace);
/usr is read-only; a handful of /etc files needed by programs, nothing else of the host
(no /home, /root, /var, no other workspaces, no database, no settings); fresh /tmp, /proc
and /dev; no network; a cleared environment (no API key, no secret key); its own pid
namespace, so everything it started dies with it. Resource limits: address space, file
size, processes. The process limit only binds a non-root uid, so a root server runs the
sandbox as the workspace's owner when that owner is not root.
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


def sandbox_argv(bwrap: str, workspace: str, command: str) -> list[str]:
    argv = [bwrap, "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin", "lib32", "libx32"):
        target = os.path.realpath(f"/{name}")
        if target.startswith("/usr/"):
            argv += ["--symlink", target.removeprefix("/"), f"/{name}"]
    for path in ETC_FILES:
        if os.path.exists(path):
            argv += ["--ro-bind", path, path]
    argv += [
        "--bind", workspace, "/workspace",
        "--chdir", "/workspace",
        "--tmpfs", "/tmp",
        "--proc", "/proc",
        "--dev", "/dev",
        "--unshare-all",  # user, ipc, pid, net, uts, cgroup namespaces: no network
        "--hostname", "sandbox",
        "--die-with-parent",
        "--new-session",  # no TIOCSTI into the server's terminal
        "--clearenv",
        "--setenv", "PATH", SANDBOX_PATH,
        "--setenv", "HOME", "/workspace",
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "TERM", "dumb",
        "--setenv", "TMPDIR", "/tmp",
        "--", "/bin/bash", "-c", command,
    ]  # fmt: skip
    return argv


def _process_count(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                count += entry.stat().st_uid == uid
    return count


def _limits(uid: int | None, gid: int | None, nproc: int) -> Callable[[], None]:
    def apply() -> None:  # runs in the child between fork and exec
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if uid is not None and gid is not None:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
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
            argv = sandbox_argv(bwrap, root, command)
            uid = gid = None
            nproc = PROCESS_LIMIT
            if os.geteuid() == 0:
                st = os.stat(root)
                if st.st_uid != 0:
                    uid, gid = st.st_uid, st.st_gid
            else:
                # The limit counts every process of this uid, not only the sandbox's.
                nproc += _process_count(os.getuid())
            preexec = _limits(uid, gid, nproc)
            env = {"PATH": SANDBOX_PATH}
        else:
            argv, preexec = ["/bin/bash", "-c", command], None
            env = {"PATH": SANDBOX_PATH, "HOME": root, "LANG": "C.UTF-8", "TERM": "dumb"}
        result = await run_process(
            argv, env=env, timeout=self.timeout, output_cap=OUTPUT_CAP, cwd=root,
            merge_stderr=True, preexec_fn=preexec,
        )  # fmt: skip
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
