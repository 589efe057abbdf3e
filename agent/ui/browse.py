"""Read-only browsing of a workspace for the page: directory listings and file views.

Everything goes through the same confinement as the agent's tools (``Workspace.open``,
walked from the root's descriptor) and runs in a file worker as the workspace's owner (the
user's own file host when the server has dropped root), with a deadline.
"""

from __future__ import annotations

from agent.core.tools.browsing import (
    DOWNLOAD_CAP,
    MAX_ENTRIES,
    VIEW_CAP,
    Entry,
    FileView,
    TooLarge,
    browse_path,
    download_path,
)
from agent.core.tools.fileio import workers
from agent.core.tools.workspace import Workspace

__all__ = ["DOWNLOAD_CAP", "MAX_ENTRIES", "VIEW_CAP", "Entry", "FileView", "TooLarge"]


def browse(workspace: Workspace, path: str) -> tuple[str, list[Entry] | FileView, bool]:
    """(path relative to the root, entries or the file, whether the listing was cut)."""
    return workers.call(workspace, browse_path, workspace, path or ".")


def download(workspace: Workspace, path: str, cap: int = DOWNLOAD_CAP) -> tuple[str, bytes]:
    """(path relative to the root, the file's bytes) for a download: a regular file inside
    the workspace (walked from the root's descriptor, never through a symlink out of it;
    a FIFO, socket or device refused before any I/O), whole, up to ``cap`` bytes."""
    return workers.call(workspace, download_path, workspace, path, cap)


def crumbs(rel: str) -> list[tuple[str, str]]:
    """(name, path) pairs from the root down to ``rel``."""
    out = [("workspace", "")]
    parts = [p for p in rel.split("/") if p]
    for i, name in enumerate(parts):
        out.append((name, "/".join(parts[: i + 1])))
    return out
