"""The file operations a user's file host runs, by name. The server sends a name and JSON
arguments; the host answers JSON, with a file's bytes beside it. Both sides use this table,
so an operation is added in one place."""

from __future__ import annotations

import asyncio
import re
from dataclasses import asdict
from typing import Any

from agent.core.archive_formats import ArchiveError
from agent.core.instructions import read_directories
from agent.core.projects import ops as project_ops
from agent.core.system_prompt import read_agents_file
from agent.core.tools.browsing import (
    Entry,
    FileView,
    TooLarge,
    browse_path,
    download_path,
)
from agent.core.tools.workspace import PathError, Workspace
from agent.sandbox import archive_ops, git_spawn

# What the server calls (a function given to the file workers) -> the operation's name.
NAMES = {
    browse_path: "browse",
    download_path: "download",
    Workspace.write: "write",
    Workspace.remove: "remove",
    read_agents_file: "agents_file",
    read_directories: "directories",
}


def request_of(fn, args: tuple) -> tuple[str, list, bytes]:
    """The operation for ``fn(*args)`` as the file workers call it: (name, JSON args, bytes)."""
    name = NAMES.get(getattr(fn, "__func__", fn))
    if name is None:
        raise TypeError(f"{fn!r} is not a file host operation")
    if name == "write":
        path, data = args
        return name, [path], bytes(data)
    rest = list(args if hasattr(fn, "__self__") else args[1:])  # the workspace is the host's
    return name, rest, b""


def run(workspace: Workspace, tools: dict, name: str, args: list, blob: bytes,
        homes: Workspace | None = None):  # fmt: skip
    """In the host: the operation's JSON result and bytes."""
    if name == "cli_home":
        return cli_home(homes, *args), b""
    if name in ("archive_open", "archive_chunk", "archive_unpack", "archive_discard"):
        return archive_ops.run(workspace, name, args, blob), b""
    if name == "tool":
        tool_name, params = args
        result = asyncio.run(tools[tool_name].execute(params))
        return {"content": result.content, "is_error": result.is_error,
                "display": result.display}, b""  # fmt: skip
    if name == "preview":
        tool_name, params = args
        return asyncio.run(tools[tool_name].preview(params)), b""
    if name == "browse":
        rel, shown, truncated = browse_path(workspace, *args)
        if isinstance(shown, FileView):
            return {"rel": rel, "file": asdict(shown), "truncated": truncated}, b""
        return {"rel": rel, "entries": [asdict(e) for e in shown], "truncated": truncated}, b""
    if name == "download":
        rel, data = download_path(workspace, *args)
        return {"rel": rel}, data
    if name == "write":
        rel, created = workspace.write(args[0], blob)
        return {"rel": rel, "created": created}, b""
    if name == "remove":
        return {"rel": workspace.remove(args[0])}, b""
    if name == "agents_file":
        return read_agents_file(workspace, *args), b""
    if name == "directories":
        return read_directories(workspace, *args), b""
    raise ValueError(f"unknown operation {name!r}")


CONVERSATION = re.compile(r"^[0-9a-f]{32}$")


def cli_home(homes: Workspace | None, conversation: str, files: dict) -> str:
    """A conversation's CLI home, made by the user: its directory and the files that point
    the CLI at the gateway. Nothing outside the homes can be named."""
    if homes is None or not isinstance(conversation, str) or not CONVERSATION.match(conversation):
        raise PathError("not a conversation's home")
    homes.write(f"{conversation}/.keep", b"")
    for relative, text in files.items():
        homes.write(f"{conversation}/{relative}", str(text).encode())
    return conversation


def result_of(name: str, result: Any, blob: bytes):
    """On the server: the value the local call would have returned. The host runs as the
    user: its answer is checked for shape, never trusted to be one."""
    try:
        if name == "project":
            if isinstance(result, dict):
                return result, blob
            raise TypeError
        if name == "browse":
            if "file" in result:
                shown = FileView(**result["file"])
            else:
                shown = [Entry(**e) for e in result["entries"]]
            return str(result["rel"]), shown, bool(result["truncated"])
        if name == "download":
            return str(result["rel"]), blob
        if name == "write":
            return str(result["rel"]), bool(result["created"])
        if name == "remove":
            return str(result["rel"])
        if name == "agents_file":
            return result if result is None or isinstance(result, str) else None
        if name == "directories":
            return [str(t) for t in result]
    except (TypeError, KeyError):
        pass
    raise PathError("the workspace's file host answered out of shape")


def error_of(header: dict) -> Exception:
    message = str(header.get("message", "the file operation failed"))[:4000]
    git = project_ops.error_from(str(header.get("error")), message)
    if git is not None:
        return git
    if header.get("error") == "too_large":
        return TooLarge(message)
    if header.get("error") == "bad_archive":
        return ArchiveError(message)
    return PathError(message)


def error_header(exc: BaseException) -> dict:
    if isinstance(exc, TooLarge):
        return {"error": "too_large", "message": str(exc)}
    if isinstance(exc, ArchiveError):
        return {"error": "bad_archive", "message": str(exc)}
    if isinstance(exc, (PathError, git_spawn.Refused)):
        return {"error": "path", "message": str(exc)}
    code = project_ops.error_code(exc)
    if code is not None:
        return {"error": code, "message": str(exc)[:4000]}
    return {"error": "internal", "message": f"the file operation failed ({type(exc).__name__})"}
