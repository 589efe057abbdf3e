"""Read-only browsing of a workspace for the page: directory listings and file views.

Everything goes through the same confinement as the agent's tools (``Workspace.open``):
no path leaves the workspace, symlinks are shown but never followed out of it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from .tools.workspace import PathError, Workspace

VIEW_CAP = 1_000_000
MAX_ENTRIES = 2000


@dataclass(frozen=True)
class Entry:
    name: str
    path: str  # relative to the workspace root
    kind: str  # dir | file | link | other
    size: int
    mtime: float


@dataclass(frozen=True)
class FileView:
    path: str
    size: int
    text: str | None  # None for a binary file
    truncated: bool


def normalize(workspace: Workspace, path: str) -> str:
    real = workspace.resolve(path or ".")
    rel = workspace.relative(real)
    return "" if rel == "." else rel


def is_dir(workspace: Workspace, path: str) -> bool:
    try:
        fd, _ = workspace.open(path or ".", os.O_RDONLY)
    except PathError:
        return False
    try:
        return stat.S_ISDIR(os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def list_entries(workspace: Workspace, path: str) -> tuple[list[Entry], bool]:
    """(entries, truncated) of a workspace directory, directories first."""
    rel = normalize(workspace, path)
    fd, _ = workspace.open(rel or ".", os.O_RDONLY | os.O_DIRECTORY)
    entries: list[Entry] = []
    try:
        with os.scandir(fd) as it:
            for item in it:
                if len(entries) >= MAX_ENTRIES:
                    break
                try:
                    st = item.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISLNK(st.st_mode):
                    kind = "link"
                elif stat.S_ISDIR(st.st_mode):
                    kind = "dir"
                elif stat.S_ISREG(st.st_mode):
                    kind = "file"
                else:
                    kind = "other"
                child = f"{rel}/{item.name}" if rel else item.name
                entries.append(Entry(item.name, child, kind, st.st_size, st.st_mtime))
    finally:
        os.close(fd)
    entries.sort(key=lambda e: (e.kind != "dir", e.name.lower()))
    return entries, len(entries) >= MAX_ENTRIES


def view_file(workspace: Workspace, path: str) -> FileView:
    rel = normalize(workspace, path)
    fd, _ = workspace.open(rel, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PathError("not a regular file")
        data = os.read(fd, VIEW_CAP + 1) if st.st_size else b""
        while len(data) <= VIEW_CAP and (chunk := os.read(fd, VIEW_CAP + 1 - len(data))):
            data += chunk
    finally:
        os.close(fd)
    truncated = len(data) > VIEW_CAP
    data = data[:VIEW_CAP]
    if b"\x00" in data[:8192]:
        return FileView(rel, st.st_size, None, truncated)
    return FileView(rel, st.st_size, data.decode("utf-8", errors="replace"), truncated)


def crumbs(rel: str) -> list[tuple[str, str]]:
    """(name, path) pairs from the root down to ``rel``."""
    out = [("workspace", "")]
    parts = [p for p in rel.split("/") if p]
    for i, name in enumerate(parts):
        out.append((name, "/".join(parts[: i + 1])))
    return out
