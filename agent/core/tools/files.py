"""read, write and edit: file tools confined to a workspace."""

from __future__ import annotations

import difflib
import os
from typing import Any

from agent.core.tools.base import (
    ParamError,
    ToolResult,
    fail,
    object_schema,
    ok,
    optional_int,
    require_str,
)
from agent.core.tools.fileio import TIMEOUT, workers
from agent.core.tools.workspace import PathError, Workspace, os_error_message

READ_CAP = 1_000_000  # bytes a read returns at most
SCAN_CAP = 100_000_000  # bytes a line-range read may pass over to find its lines
WRITE_CAP = 10_000_000  # bytes write/edit accept
BINARY_SNIFF = 8192  # a NUL byte in the first 8 KB marks a file as binary


class FileTool:
    """A tool bound to a workspace whose blocking file work runs in a file worker, as the
    workspace's owner (``fileio``)."""

    def __init__(self, workspace: Workspace):
        self.workspace = workspace

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        try:
            if self.workspace.sandbox is not None:
                return await self.workspace.sandbox.tool(self.name, params, TIMEOUT)
            return await workers.run(self.workspace, self._execute, params)
        except PathError as exc:  # no worker free for this workspace, or a stuck call
            return fail(str(exc))

    def _execute(self, params: dict[str, Any]) -> ToolResult:
        raise NotImplementedError


def _read_fd(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size <= limit and (chunk := os.read(fd, 65536)):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


class ReadTool(FileTool):
    name = "read"
    description = (
        "Read a text file in the workspace. Paths are relative to the workspace root. "
        "Optional start_line/end_line (1-indexed, inclusive) select a range. "
        'Returns {"content": ...} or {"error": ...}. Limits: 1 MB per read (use a line '
        "range for larger files); binary files are refused."
    )
    input_schema = object_schema(
        path=("string", "Absolute or relative file path"),
        start_line=("integer", "First line to read (1-indexed)"),
        end_line=("integer", "Last line to read (inclusive)"),
        required=("path",),
    )

    def _execute(self, params: dict[str, Any]) -> ToolResult:
        try:
            path = require_str(params, "path")
            start = optional_int(params, "start_line")
            end = optional_int(params, "end_line")
        except ParamError as exc:
            return fail(str(exc))
        if start is not None and start < 1:
            return fail("start_line must be at least 1")
        if end is not None and end < 1:
            return fail("end_line must be at least 1")
        if start is not None and end is not None and start > end:
            return fail(f"start_line ({start}) is greater than end_line ({end})")
        try:
            fd = self.workspace.open(path).fd
        except PathError as exc:
            return fail(str(exc))
        try:
            with os.fdopen(fd, "rb", closefd=False) as f:
                if start is None and end is None:
                    return _whole_file(f)
                return _line_range(f, start or 1, end)
        except OSError as exc:
            return fail(os_error_message(exc))
        finally:
            os.close(fd)


def _whole_file(f) -> ToolResult:
    data = f.read(READ_CAP + 1)
    if b"\x00" in data[:BINARY_SNIFF]:
        return fail("binary file; refusing to read it")
    if len(data) > READ_CAP:
        return fail("file is larger than 1 MB; read it in parts with start_line/end_line")
    return ok(content=data.decode("utf-8", errors="replace"))


def _line_range(f, first: int, last: int | None) -> ToolResult:
    """Lines first..last (inclusive), streamed so a large file need not fit in memory.
    Every line is read with a bound: a file may be one endless line (a sparse file of
    zeros costs its owner nothing), and finding the start may not read without end."""
    if b"\x00" in f.peek(BINARY_SNIFF)[:BINARY_SNIFF]:
        return fail("binary file; refusing to read it")
    selected: list[bytes] = []
    size = scanned = count = 0
    while line := f.readline(READ_CAP + 1):
        if len(line) > READ_CAP:
            return fail("the file has a line longer than 1 MB; refusing to read it")
        count += 1
        scanned += len(line)
        if count < first:
            if scanned > SCAN_CAP:
                return fail(
                    f"line {first} is more than 100 MB into the file; read the part you need "
                    "with bash (head, tail, sed) instead"
                )
            continue
        if last is not None and count > last:
            break
        selected.append(line)
        size += len(line)
        if size > READ_CAP:
            return fail("the selected lines exceed 1 MB; choose a smaller range")
    if first > count or not selected:
        return fail(f"start_line {first} is beyond the end of the file ({count} lines)")
    content = b"".join(selected).decode("utf-8", errors="replace")
    if last is not None and count > last:
        content = content.removesuffix("\n")
    return ok(content=content)


def _encoded(text: str, what: str) -> bytes | ToolResult:
    """``text`` as UTF-8, or the error for a model's lone surrogate (a half emoji)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return fail(f"{what} is not valid Unicode (it has a lone surrogate); nothing was written")


class WriteTool(FileTool):
    name = "write"
    description = (
        "Create or overwrite a file in the workspace with the given content; parent "
        "directories are created. Use for new files or full rewrites; prefer edit for changes. "
        "Limit: 10 MB."
    )
    input_schema = object_schema(
        path=("string", "File path relative to the workspace"),
        content=("string", "The complete new file content"),
        required=("path", "content"),
    )

    def _execute(self, params: dict[str, Any]) -> ToolResult:
        try:
            path = require_str(params, "path")
            content = require_str(params, "content", allow_empty=True)
        except ParamError as exc:
            return fail(str(exc))
        data = _encoded(content, "content")
        if isinstance(data, ToolResult):
            return data
        if len(data) > WRITE_CAP:
            return fail("content exceeds 10 MB")
        try:
            rel, created = self.workspace.write(path, data)
        except PathError as exc:
            return fail(str(exc))
        existed = not created
        verb = "Overwrote" if existed else "Created"
        return ok(
            display={"kind": "write", "path": rel, "bytes": len(data), "created": not existed},
            result=f"{verb} {rel} ({len(data)} bytes)",
        )


class EditTool(FileTool):
    name = "edit"
    description = (
        "Replace one exact occurrence of old_str with new_str in a workspace file. old_str "
        "must match exactly once (whitespace included); add surrounding lines to make it "
        "unique. Read the file first."
    )
    input_schema = object_schema(
        path=("string", "File path relative to the workspace"),
        old_str=("string", "Exact text to replace (unique)"),
        new_str=("string", "Replacement text"),
        required=("path", "old_str", "new_str"),
    )

    async def preview(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """The diff this edit would make, read only (nothing is written): what an approval
        card shows. None when the edit would fail."""
        try:
            if self.workspace.sandbox is not None:
                return await self.workspace.sandbox.preview(self.name, params, TIMEOUT)
            return await workers.run(self.workspace, self._preview, params)
        except PathError:
            return None

    def _preview(self, params: dict[str, Any]) -> dict[str, Any] | None:
        planned = self._plan(params)
        if isinstance(planned, ToolResult):
            return None
        rel, text, updated, _ = planned
        return {"kind": "diff", "path": rel, "diff": _diff(rel, text, updated)}

    def _plan(self, params: dict[str, Any]) -> tuple[str, str, str, bytes] | ToolResult:
        """The file's path, its text, the text edited and its bytes; or the failure."""
        try:
            path = require_str(params, "path")
            old = require_str(params, "old_str")
            new = require_str(params, "new_str", allow_empty=True)
        except ParamError as exc:
            return fail(str(exc))
        try:
            opened = self.workspace.open(path)
        except PathError as exc:
            return fail(str(exc))
        rel = opened.rel
        try:
            data = _read_fd(opened.fd, WRITE_CAP)
        except OSError as exc:
            return fail(f"cannot edit file: {os_error_message(exc)}")
        finally:
            os.close(opened.fd)
        if len(data) > WRITE_CAP:
            return fail("file exceeds 10 MB")
        if b"\x00" in data[:BINARY_SNIFF]:
            return fail("binary file; refusing to edit it")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return fail("file is not valid UTF-8; refusing to edit it")
        count = text.count(old)
        if count == 0:
            return fail("old_str not found in the file")
        if count > 1:
            return fail(f"old_str matches {count} times; include more context to make it unique")
        updated = text.replace(old, new, 1)
        encoded = _encoded(updated, "new_str")
        if isinstance(encoded, ToolResult):
            return encoded
        if len(encoded) > WRITE_CAP:
            return fail("the edited file would exceed 10 MB")
        return rel, text, updated, encoded

    def _execute(self, params: dict[str, Any]) -> ToolResult:
        planned = self._plan(params)
        if isinstance(planned, ToolResult):
            return planned
        rel, text, updated, encoded = planned
        old = params["old_str"]
        try:
            # Written to the name the read went to (symlinks already resolved), replaced
            # whole: a full disk leaves the file as it was.
            self.workspace.write(rel, encoded, make_parents=False)
        except PathError as exc:
            return fail(f"cannot edit file: {exc}")
        diff = _diff(rel, text, updated)
        line = text[: text.index(old)].count("\n") + 1
        return ok(
            display={"kind": "diff", "path": rel, "diff": diff},
            result=f"Edited {rel} at line {line}",
        )


def _diff(rel: str, text: str, updated: str) -> str:
    return "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True),
            updated.splitlines(keepends=True),
            fromfile=f"a/{rel}",
            tofile=f"b/{rel}",
        )
    )
