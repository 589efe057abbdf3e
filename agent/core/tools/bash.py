"""bash: run a shell command in the workspace, by default inside a bubblewrap sandbox.

Sandbox (HARNESS_BASH=sandbox): only the workspace is writable (mounted at /workspace);
/usr is read-only; a handful of /etc files needed by programs, nothing else of the host
(no /home, /root, /var, no other workspaces, no database, no settings); fresh /tmp, /proc
and /dev; no network; a cleared environment (no API key, no secret key); its own pid
namespace, so everything it started dies with it. Resource limits: where the host allows,
cgroups (agent/core/tools/cgroups.py) bound the processes and memory of all of a workspace's
calls together, and each call's processes are killed with its cgroup; rlimits besides:
address space, file size, and processes when no pids cgroup does it. The process rlimit
only binds a non-root uid, so a root server runs the command as the workspace's owner
(workspaces it creates belong to an unprivileged uid).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import subprocess
from collections.abc import Callable
from typing import Any

from agent.core.tools import background
from agent.core.tools.base import ParamError, ToolResult, fail, object_schema, ok, require_str
from agent.core.tools.bwrap import SANDBOX_PATH, SETPRIV, bwrap_path, sandbox_argv
from agent.core.tools.cgroup_host import CONTROLLERS, SandboxLimits
from agent.core.tools.cgroup_run import RunCgroup, RunStats
from agent.core.tools.cgroups import SandboxCgroups, sandbox_cgroups
from agent.core.tools.process import run_process
from agent.core.tools.workspace import Workspace

TIMEOUT = 120.0
OUTPUT_CAP = 100_000
MEMORY_LIMIT = 4 * 1024**3  # address space per process
FILE_SIZE_LIMIT = 1024**3
MODES = ("sandbox", "off", "unsafe")


def disk_usage(st: os.statvfs_result) -> tuple[int, int, int, int]:
    """(bytes free, bytes in all, inodes in all, inodes free) of a file system."""
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize, st.f_files, st.f_favail


def disk_full_note(root: str, quota_mb: int | None,
                   usage: tuple[int, int, int, int] | None = None) -> str:  # fmt: skip
    """Why a failed command may have failed, when the workspace's disk is (all but) full:
    the model then frees space instead of retrying. Empty otherwise. ``usage``: the
    workspace's ``disk_usage`` as measured where it is mounted (the broker's)."""
    if usage is None:
        try:
            usage = disk_usage(os.statvfs(root))
        except OSError:
            return ""
    free, size, files, files_free = usage
    nearly_empty = min(max(1024**2, size // 100), 64 * 1024**2)  # what a write may leave
    if free >= nearly_empty and (files == 0 or files_free > 0):
        return ""
    if quota_mb is not None:
        return (
            f"; the workspace is full: its quota is {quota_mb} MB. Delete files (or write "
            "less) to make room"
        )
    return "; the workspace's disk is full. Delete files to make room"


def _process_count(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                count += entry.stat().st_uid == uid
    return count


def _limits(nproc: int | None, cgroup: RunCgroup | None = None) -> Callable[[], None]:
    def apply() -> None:  # runs in the child between fork and exec; inherited by all
        if cgroup is not None:
            cgroup.join()  # first: everything the command does is inside its cgroup
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return apply


# Releases under way: a cancelled call's cgroup is still killed and removed (shielded).
_releasing: set[asyncio.Task] = set()


async def _release(manager: SandboxCgroups, cgroup: RunCgroup) -> RunStats:
    task = asyncio.ensure_future(manager.release(cgroup))
    _releasing.add(task)
    task.add_done_callback(_releasing.discard)
    return await asyncio.shield(task)


class BashTool:
    name = "bash"
    input_schema = object_schema(
        command=("string", "The bash command to run"),
        required=("command",),
    )

    def __init__(
        self,
        workspace: Workspace,
        mode: str = "sandbox",
        timeout: float = TIMEOUT,
        limits: SandboxLimits | None = None,
    ):
        if mode not in ("sandbox", "unsafe"):
            raise ValueError(f"bash mode must be sandbox or unsafe, not {mode!r}")
        self.workspace = workspace
        self.mode = mode
        self.timeout = timeout
        # Processes and memory of all this workspace's sandboxed calls together: cgroups
        # where the host allows (shared set-up per server process), else rlimits.
        self.limits = limits or SandboxLimits()
        self.cgroups = sandbox_cgroups(self.limits) if mode == "sandbox" else None
        network = (
            "the network only through an allow-listing proxy (HTTP_PROXY and HTTPS_PROXY are "
            "set; a host it refuses answers 403 saying why)"
            if workspace.egress
            else "no network"
        )
        where = (
            "in a sandbox: the workspace (at /workspace) is the only writable place, there is "
            f"{network} and no background process outlives the call"
            if mode == "sandbox"
            else "directly on the host (unsandboxed)"
        )
        self.description = (
            f"Run a bash command in the workspace, {where}. stdout and stderr are combined. "
            f"Limits: {int(timeout)} s timeout, 100 KB of output (the middle is cut), "
            "a non-zero exit status is an error."
        )
        if workspace.background is not None:
            # A server to preview, a watcher: bash's own calls end everything they start.
            self.input_schema = object_schema(
                command=("string", "The bash command to run"),
                background=("boolean", "Start a long-running command (a dev server, a "
                            "watcher) that keeps running after the call; see the `background` "
                            "tool for its output"),
                required=("command",),
            )  # fmt: skip
            self.description += (
                " With background: true the command keeps running after the call, in the "
                "conversation's terminal sandbox; the call returns after a few seconds with "
                "its output so far and the ports it began to listen on, each with the "
                "address where the user previews it (tell them)."
            )
        if mode == "sandbox":
            self.description += (
                f" All commands running at once in this workspace share {self.limits.pids} "
                f"processes and {self.limits.memory_mb} MB of memory."
            )

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        try:
            command = require_str(params, "command")
        except ParamError as exc:
            return fail(str(exc))
        if params.get("background") is True:
            if self.workspace.background is None:
                return fail("background commands are not available here")
            return await background.started(self.workspace.background, command)
        root = str(self.workspace.root)
        stats = None
        sandboxed = self.mode == "sandbox"
        try:
            egress = await self.workspace.egress() if sandboxed and self.workspace.egress else None
        except OSError as exc:
            return fail(f"bash is unavailable: the egress proxy could not listen ({exc})")
        if self.workspace.sandbox is not None:
            # The server dropped root: its broker runs the command as the user.
            try:
                result, stats, usage = await self.workspace.sandbox.bash(
                    command, self.timeout, OUTPUT_CAP, unsafe=not sandboxed, egress=egress
                )
            except RuntimeError as exc:
                return fail(f"bash is unavailable: {exc}")
            return await self._outcome(result, stats, root, usage)
        if self.mode == "sandbox":
            bwrap = bwrap_path()
            if bwrap is None:
                return fail(
                    "bash is unavailable: the sandbox needs bubblewrap (`bwrap`), which is not "
                    "installed on the server. Install it, or set HARNESS_BASH=off."
                )
            run_as = None
            nproc = self.limits.pids
            if os.geteuid() == 0:
                st = os.stat(root)
                if st.st_uid != 0 and os.path.exists(SETPRIV):
                    run_as = (st.st_uid, st.st_gid)
            else:
                # The limit counts every process of this uid, not only the sandbox's.
                nproc += _process_count(os.getuid())
            try:
                cgroup = await self._open_cgroup(root)
            except _Unavailable as exc:
                return fail(str(exc))
            pass_fds = []
            try:
                pass_fds.append(os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
                if egress is not None:
                    pass_fds.append(os.open(egress, os.O_PATH | os.O_CLOEXEC))
            except BaseException:
                for fd in pass_fds:
                    os.close(fd)
                if cgroup is not None:
                    await _release(self.cgroups, cgroup)
                raise
            workspace_fd, egress_fd = pass_fds[0], (pass_fds[1:] or [None])[0]
            argv = sandbox_argv(bwrap, workspace_fd, command, run_as, egress=egress_fd)
            at = argv.index("--")
            argv[at:at] = self.workspace.sandbox_binds
            # A pids cgroup counts the sandbox's processes whatever their uid, per
            # workspace; a per-uid limit on top would again couple users sharing a uid.
            pids_by_cgroup = cgroup is not None and "pids" in cgroup.controllers
            preexec = _limits(None if pids_by_cgroup else nproc, cgroup)
            env = {"PATH": SANDBOX_PATH}
        else:
            argv, preexec, pass_fds, cgroup = ["/bin/bash", "-c", command], None, [], None
            env = {"PATH": SANDBOX_PATH, "HOME": root, "LANG": "C.UTF-8", "TERM": "dumb"}
        try:
            result = await run_process(
                argv, env=env, timeout=self.timeout, output_cap=OUTPUT_CAP, cwd=root,
                merge_stderr=True, preexec_fn=preexec, pass_fds=pass_fds,
            )  # fmt: skip
        except subprocess.SubprocessError as exc:  # the preexec_fn failed: nothing ran
            return fail(f"bash is unavailable: the sandbox could not be started ({exc})")
        finally:
            for fd in pass_fds:
                os.close(fd)
            if cgroup is not None:
                assert self.cgroups is not None
                stats = await _release(self.cgroups, cgroup)
        return await self._outcome(result, stats, root)

    async def _outcome(self, result, stats: RunStats | None, root: str,
                       usage: tuple[int, int, int, int] | None = None) -> ToolResult:  # fmt: skip
        display = {
            "kind": "bash",
            "exit_code": result.returncode,
            "timed_out": result.timed_out,
            "truncated": result.truncated,
        }
        if stats is not None and stats.oom_kills:
            # Its own message: a bare "status 137" or "Killed" would have the model retry.
            late = " (it had also run past the time limit)" if result.timed_out else ""
            return fail(
                f"the command ran out of memory (limit {self.limits.memory_mb} MB, shared by "
                f"the commands running at once in this workspace) and was killed{late}. Use "
                "less memory: smaller inputs, fewer parallel jobs",
                display, exit_code=result.returncode, output=result.output,
            )  # fmt: skip
        if result.timed_out:
            return fail(
                f"command timed out after {int(self.timeout)} s and was killed",
                display, output=result.output,
            )  # fmt: skip
        if result.returncode != 0:
            # The workspace's size limit (the server's workspaces carry it, agent/
            # workspaces.py; a CLI workspace has none) is named in the error.
            full = await asyncio.to_thread(disk_full_note, root, self.workspace.quota_mb, usage)
            return fail(
                f"command exited with status {result.returncode}{full}{self._pids_note(stats)}",
                display, exit_code=result.returncode, output=result.output,
            )  # fmt: skip
        return ok(display, exit_code=0, output=result.output)

    async def _open_cgroup(self, root: str) -> RunCgroup | None:
        """This call's cgroup (None: rlimits only); set-up and mkdir happen in a thread."""
        if self.cgroups is None:
            return None
        return await asyncio.to_thread(self._open_cgroup_blocking, self.cgroups, root)

    def _open_cgroup_blocking(self, cgroups: SandboxCgroups, root: str) -> RunCgroup | None:
        enforced = cgroups.enforced()
        if self.limits.cgroups == "required" and not enforced >= frozenset(CONTROLLERS):
            _, text = cgroups.describe(enforced)
            raise _Unavailable(
                "bash is unavailable: HARNESS_SANDBOX_CGROUPS=required, but the sandbox's "
                f"process and memory limits cannot be enforced by cgroups here: {text}"
            )
        try:
            return cgroups.open_run(root)
        except OSError as exc:
            # cgroups worked at set-up, so this is unexpected; running without the limits
            # the deployment has would be worse than refusing.
            raise _Unavailable(
                f"bash is unavailable: the sandbox's cgroup could not be made ({exc})"
            ) from exc

    def _pids_note(self, stats: RunStats | None) -> str:
        if stats is None or not stats.pids_limit_hits:
            return ""
        return (
            f"; the process limit was reached ({self.limits.pids} processes for the "
            "commands running at once in this workspace)"
        )


class _Unavailable(Exception):
    pass
