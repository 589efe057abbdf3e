"""Instructions in layers (progressive disclosure): the workspace's AGENTS.md is
in the system prompt; a subdirectory's AGENTS.md (or CLAUDE.md) reaches the model the first
time a tool touches that directory, beside that tool's result, so a large repository's
notes cost tokens only where the agent works.

Read like any tool's file (``system_prompt.read_agents_file``): walked from the root's
descriptor in a file worker, as the workspace's owner; a symlink out or a FIFO gives
nothing. What was disclosed is known from the history itself (the marker line), so a later
prompt of the same conversation does not repeat it, and a history that lost it (trimmed or
compacted) gets it again.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from typing import Any

from agent.core.system_prompt import read_agents_file
from agent.core.tools.fileio import workers
from agent.core.tools.workspace import SANDBOX_ROOT, Workspace

MARKER = "Instructions for files under {directory}/ (from {name}):"
_MARKED = re.compile(r"^Instructions for files under (.+?)/ \(from \1/[^/\n]+\.md\):$", re.M)
PATH_TOOLS = frozenset({"read", "write", "edit", "list_dir", "grep"})
MAX_DEPTH = 32  # directories of one path looked at


def directories_of(tool: str, params: Any, roots: tuple[str, ...] = (SANDBOX_ROOT,)) -> list[str]:
    """The workspace directories a call touches, outermost first, root excluded: a file's
    parents, a listed or searched directory and its parents. Lexical only (the tool itself
    resolves and confines the path); a path that climbs out touches nothing here. An
    absolute path counts below one of ``roots`` (the workspace as the sandbox or the host
    sees it, which the tools take too), else it touches nothing."""
    if tool not in PATH_TOOLS or not isinstance(params, dict):
        return []
    path = params.get("path")
    if not isinstance(path, str) or not path.strip() or "\0" in path:
        return []
    normal = posixpath.normpath(path.strip())
    if normal.startswith("/"):
        root = next(
            (r for r in roots if normal == r or normal.startswith(r.rstrip("/") + "/")), None
        )
        if root is None:
            return []
        normal = normal[len(root.rstrip("/")) :]
    normal = normal.lstrip("/")
    if normal in ("", ".") or normal == ".." or normal.startswith("../"):
        return []
    parts = normal.split("/")
    if tool in ("read", "write", "edit"):
        parts = parts[:-1]  # the file's directory
    parts = parts[:MAX_DEPTH]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def disclosed_in(messages: Iterable[dict[str, Any]]) -> set[str]:
    """The directories whose instructions a history already holds."""
    found: set[str] = set()
    for message in messages:
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")  # [the tool's result, the notes given beside it]
                for part in inner[1:] if isinstance(inner, list) else ():
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        found.update(_MARKED.findall(part["text"]))
    return found


def without_notes(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history with the notes beside tool results taken out, each result as the tool
    gave it (the events hold only that). The notes are files of the workspace the history
    was made in: a copy for someone else (a fork) must not carry them, and a later run in
    another workspace then finds that workspace's own."""
    out = []
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            message = {**message, "content": [_bare(block) for block in content]}
        out.append(message)
    return out


def _bare(block: Any) -> Any:
    """A tool_result block without its notes: [the result, notes…] back to the result."""
    if not isinstance(block, dict) or block.get("type") != "tool_result":
        return block
    inner = block.get("content")
    if not isinstance(inner, list) or len(inner) < 2:
        return block
    first, rest = inner[0], [p for p in inner[1:] if not _is_text(p)]
    if not rest and _is_text(first):
        return {**block, "content": first["text"]}
    return {**block, "content": [first, *rest]}


def _is_text(part: Any) -> bool:
    return (
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
    )


class DirectoryInstructions:
    """Per run: which subdirectories' instructions the model has, and the next ones."""

    def __init__(self, workspace: Workspace, messages: Iterable[dict[str, Any]] = ()):
        self.workspace = workspace
        self.looked: set[str] = disclosed_in(messages)  # disclosed, or found to have none

    async def after_tool(self, tool: str, params: Any) -> str | None:
        """The instructions of the directories this call touched for the first time."""
        roots = (SANDBOX_ROOT, str(self.workspace.root))
        new = [d for d in directories_of(tool, params, roots) if d not in self.looked]
        if not new:
            return None
        self.looked.update(new)
        found = await workers.run(self.workspace, read_directories, self.workspace, new)
        return "\n\n".join(found) or None


def read_directories(workspace: Workspace, directories: list[str]) -> list[str]:
    """Blocking, in a file worker: each directory's file, if it has one."""
    found = []
    for directory in directories:
        text = read_agents_file(workspace, directory, MARKER)
        if text:
            # The file's own lines must not pass for a marker: a later prompt would
            # take that directory's instructions as given and never give them.
            marker, newline, body = text.partition("\n")
            found.append(marker + newline + _MARKED.sub(r" \g<0>", body))
    return found
