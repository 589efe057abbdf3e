"""Read-only browsing of a workspace: directory listings, file views and downloads.

Everything goes through the same confinement as the agent's tools (``Workspace.open``,
walked from the root's descriptor) and runs in a file worker as the workspace's owner,
with a deadline, so a request thread never blocks on the file system for long: no path
leaves the workspace, symlinks are shown but never followed out of it, and nothing but
regular files and directories is opened.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from agent.core.tools.workspace import PathError, Workspace

VIEW_CAP = 1_000_000
DOWNLOAD_CAP = 10 * 1024 * 1024  # bytes: a larger file is refused (TooLarge), never cut
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


def browse_path(workspace: Workspace, path: str) -> tuple[str, list[Entry] | FileView, bool]:
    opened = workspace.open(path, directory=None)
    rel = "" if opened.rel == "." else opened.rel
    try:
        st = os.fstat(opened.fd)
        if stat.S_ISDIR(st.st_mode):
            entries = _list_entries(opened.fd, rel, () if rel else workspace.hidden)
            return rel, entries, len(entries) >= MAX_ENTRIES
        return rel, _view_file(opened.fd, st, rel), False
    finally:
        os.close(opened.fd)


def _list_entries(fd: int, rel: str, hidden: tuple[str, ...] = ()) -> list[Entry]:
    """A directory's entries, directories first (never following a symlink to stat it)."""
    entries: list[Entry] = []
    with os.scandir(fd) as it:  # it reads a duplicate of fd
        for item in it:
            if len(entries) >= MAX_ENTRIES:
                break
            if item.name in hidden:
                continue
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
    entries.sort(key=lambda e: (e.kind != "dir", e.name.lower()))
    return entries


def _view_file(fd: int, st: os.stat_result, rel: str) -> FileView:
    data = os.read(fd, VIEW_CAP + 1) if st.st_size else b""
    while len(data) <= VIEW_CAP and (chunk := os.read(fd, VIEW_CAP + 1 - len(data))):
        data += chunk
    truncated = len(data) > VIEW_CAP
    data = data[:VIEW_CAP]
    if b"\x00" in data[:8192]:
        return FileView(rel, st.st_size, None, truncated)
    return FileView(rel, st.st_size, data.decode("utf-8", errors="replace"), truncated)


class TooLarge(PathError):
    """A file over ``DOWNLOAD_CAP``."""


def download_path(workspace: Workspace, path: str, cap: int) -> tuple[str, bytes]:
    opened = workspace.open(path, directory=False)  # O_NOFOLLOW | O_NONBLOCK, regular only
    try:
        st = os.fstat(opened.fd)
        if not stat.S_ISREG(st.st_mode):
            raise PathError("not a regular file")
        too_large = TooLarge(f"the file is over {cap / (1024 * 1024):g} MB, too large to download")
        if st.st_size > cap:
            raise too_large
        chunks, size = [], 0
        while chunk := os.read(opened.fd, min(1 << 20, cap + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:  # it grew since the fstat
                raise too_large
        return opened.rel, b"".join(chunks)
    finally:
        os.close(opened.fd)
