"""list_dir (raw ``ls -al``) and grep (system grep, BRE), exactly as seed 000 specifies.

Both run the system command on a directory descriptor already checked to be inside the
workspace (``cwd=/proc/self/fd/N``), never on a path string that could be swapped meanwhile.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from .base import ParamError, ToolResult, fail, ok, require_str
from .process import plain_env, run_process
from .workspace import PathError, Workspace

GREP = "/usr/bin/grep" if os.path.exists("/usr/bin/grep") else "/bin/grep"
LS = "/usr/bin/ls" if os.path.exists("/usr/bin/ls") else "/bin/ls"
OUTPUT_CAP = 100_000
TIMEOUT = 60.0


def _fd_cwd(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


class ListDirTool:
    name = "list_dir"
    description = (
        "List a workspace directory with `ls -al` (hidden files, permissions, owner, size, "
        'date). Returns {"entries": raw ls output} or {"error": ...}. Output over 100 KB '
        "is cut in the middle."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {"path": {"type": "string", "description": "Directory path to list"}},
        "required": ["path"],
    }

    def __init__(self, workspace: Workspace):
        self.workspace = workspace

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        try:
            path = require_str(params, "path")
            fd, _ = self.workspace.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except (ParamError, PathError) as exc:
            message = str(exc)
            return fail("directory not found" if message == "file not found" else message)
        try:
            result = await run_process(
                [LS, "-al", "."],
                env=plain_env(),
                timeout=TIMEOUT,
                output_cap=OUTPUT_CAP,
                cwd=_fd_cwd(fd),
                pass_fds=[fd],
            )
        finally:
            os.close(fd)
        if result.returncode != 0:
            return fail(_first_line(result.stderr) or "ls failed")
        return ok(entries=result.output)


class GrepTool:
    name = "grep"
    description = (
        "Search files with grep (Basic Regular Expressions, case-sensitive). A file gives "
        "`line_number:content` lines; a directory needs recursive=true and gives "
        "`filename:line_number:content`. No match is success with empty matches. "
        "Output over 100 KB is cut in the middle."
    )
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Search pattern (BRE regex)"},
            "path": {"type": "string", "description": "File or directory path"},
            "recursive": {"type": "boolean", "description": "Search recursively (default: false)"},
        },
        "required": ["pattern", "path"],
    }

    def __init__(self, workspace: Workspace):
        self.workspace = workspace

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        try:
            pattern = require_str(params, "pattern")
            path = require_str(params, "path")
        except ParamError as exc:
            return fail(str(exc))
        recursive = params.get("recursive", False)
        if not isinstance(recursive, bool):
            return fail("'recursive' must be a boolean")
        try:
            fd, real = self.workspace.open(path, os.O_RDONLY)
        except PathError as exc:
            return fail(str(exc))
        try:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                if not recursive:
                    return fail("path is a directory; set recursive to true to search it")
                # grep -r does not follow symlinks it meets below the start directory.
                argv = [GREP, "-rn", "-e", pattern, "."]
                result = await run_process(
                    argv,
                    env=plain_env(),
                    timeout=TIMEOUT,
                    output_cap=OUTPUT_CAP,
                    cwd=_fd_cwd(fd),
                    pass_fds=[fd],
                )
                prefix = self.workspace.relative(real)
                matches = result.output
                if prefix != ".":  # name files as `grep -rn PATTERN dir` would
                    matches = "".join(
                        prefix + line[1:] if line.startswith("./") else line
                        for line in matches.splitlines(keepends=True)
                    )
            else:
                result = await run_process(
                    [GREP, "-n", "-e", pattern],
                    env=plain_env(),
                    timeout=TIMEOUT,
                    output_cap=OUTPUT_CAP,
                    stdin=fd,
                )
                matches = result.output
        finally:
            os.close(fd)
        if result.timed_out:
            return fail(f"grep timed out after {int(TIMEOUT)} s")
        if result.returncode == 2 and not matches:
            message = _first_line(result.stderr).removeprefix("grep: ")
            return fail(message or "grep failed")
        return ok(matches=matches)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""
