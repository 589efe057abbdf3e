"""list_dir (raw ``ls -al``) and grep (system grep, BRE).

Both run the system command on a descriptor opened by the workspace's walk (``cwd=
/proc/self/fd/N`` for a directory, standard input for a file), never on a path string that
could be swapped meanwhile. The path is walked in a file worker, off the event loop, and a
root server runs the command as the workspace's owner. grep skips devices, FIFOs and
sockets it meets while recursing (``-D skip``): reading a FIFO would wait for a writer.
"""

from __future__ import annotations

import os
import resource
import stat
from typing import Any

from agent.core.tools.base import ParamError, ToolResult, fail, object_schema, ok, require_str
from agent.core.tools.fileio import workers
from agent.core.tools.process import plain_env, run_process
from agent.core.tools.workspace import Opened, PathError, Workspace

GREP = "/usr/bin/grep" if os.path.exists("/usr/bin/grep") else "/bin/grep"
LS = "/usr/bin/ls" if os.path.exists("/usr/bin/ls") else "/bin/ls"
OUTPUT_CAP = 100_000
TIMEOUT = 60.0
HELPER_MEMORY = 1024**3  # address space of grep and ls


def _fd_cwd(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


async def _open(workspace: Workspace, path: str, directory: bool | None) -> Opened:
    return await workers.run(
        workspace,
        lambda: workspace.open(path, directory=directory),
        abandon=lambda opened: os.close(opened.fd),
    )


def _helper_limits() -> None:  # in the child, between fork and exec
    # A workspace file can be one endless line (a sparse file of zeros): grep would
    # buffer all of it. Memory and CPU are bounded like the timeout bounds wall time.
    resource.setrlimit(resource.RLIMIT_AS, (HELPER_MEMORY, HELPER_MEMORY))
    resource.setrlimit(resource.RLIMIT_CPU, (int(TIMEOUT), int(TIMEOUT)))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


async def _run_as_owner(workspace: Workspace, argv: list[str], **kwargs):
    """The command as the workspace's owner (when a root server works for a user)."""
    owner = workspace.owner()
    if owner is not None:
        kwargs.update(user=owner[0], group=owner[1], extra_groups=[])
    return await run_process(
        argv, env=plain_env(), timeout=TIMEOUT, output_cap=OUTPUT_CAP,
        preexec_fn=_helper_limits, **kwargs,
    )  # fmt: skip


async def _in_sandbox(tool, params: dict[str, Any]) -> ToolResult:
    """The whole call in the user's file host (the server has dropped root)."""
    try:
        return await tool.workspace.sandbox.tool(tool.name, params, TIMEOUT + 5)
    except PathError as exc:
        return fail(str(exc))


class ListDirTool:
    name = "list_dir"
    description = (
        "List a workspace directory with `ls -al` (hidden files, permissions, owner, size, "
        'date). Returns {"entries": raw ls output} or {"error": ...}. Output over 100 KB '
        "is cut in the middle."
    )
    input_schema = object_schema(
        path=("string", "Directory path to list"),
        required=("path",),
    )

    def __init__(self, workspace: Workspace):
        self.workspace = workspace

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        if self.workspace.sandbox is not None:
            return await _in_sandbox(self, params)
        try:
            path = require_str(params, "path")
            fd = (await _open(self.workspace, path, True)).fd
        except (ParamError, PathError) as exc:
            message = str(exc)
            return fail("directory not found" if message == "file not found" else message)
        try:
            result = await _run_as_owner(
                self.workspace, [LS, "-al", "."], cwd=_fd_cwd(fd), pass_fds=[fd]
            )
        finally:
            os.close(fd)
        if result.returncode != 0:
            return fail(_first_line(result.stderr).removeprefix(f"{LS}: ") or "ls failed")
        return ok(entries=result.output)


class GrepTool:
    name = "grep"
    description = (
        "Search files with grep (Basic Regular Expressions, case-sensitive). A file gives "
        "`line_number:content` lines; a directory needs recursive=true and gives "
        "`filename:line_number:content`. No match is success with empty matches. "
        "Output over 100 KB is cut in the middle."
    )
    input_schema = object_schema(
        pattern=("string", "Search pattern (BRE regex)"),
        path=("string", "File or directory path"),
        recursive=("boolean", "Search recursively (default: false)"),
        required=("pattern", "path"),
    )

    def __init__(self, workspace: Workspace):
        self.workspace = workspace

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        if self.workspace.sandbox is not None:
            return await _in_sandbox(self, params)
        try:
            pattern = require_str(params, "pattern")
            path = require_str(params, "path")
        except ParamError as exc:
            return fail(str(exc))
        recursive = params.get("recursive", False)
        if not isinstance(recursive, bool):
            return fail("'recursive' must be a boolean")
        try:
            opened = await _open(self.workspace, path, None)
        except PathError as exc:
            return fail(str(exc))
        fd = opened.fd
        try:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                if not recursive:
                    return fail("path is a directory; set recursive to true to search it")
                # grep -r does not follow symlinks it meets below the start directory.
                hidden = [f"--exclude-dir={name}" for name in self.workspace.hidden]
                argv = [GREP, "-rn", "-D", "skip", *hidden, "-e", pattern, "."]
                result = await _run_as_owner(self.workspace, argv, cwd=_fd_cwd(fd), pass_fds=[fd])
                matches = result.output
                if opened.rel != ".":  # name files as `grep -rn PATTERN dir` would
                    matches = "".join(
                        opened.rel + line[1:] if line.startswith("./") else line
                        for line in matches.splitlines(keepends=True)
                    )
            else:
                argv = [GREP, "-n", "-e", pattern]
                result = await _run_as_owner(self.workspace, argv, stdin=fd)
                matches = result.output
        finally:
            os.close(fd)
        if result.timed_out:
            return fail(f"grep timed out after {int(TIMEOUT)} s")
        if result.returncode == 2 and not matches:
            # grep names itself by its path ("/usr/bin/grep: x: ..."): not the host's path
            # to show the model.
            message = _first_line(result.stderr).removeprefix(f"{GREP}: ").removeprefix("grep: ")
            return fail(message or "grep failed")
        return ok(matches=matches)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""
