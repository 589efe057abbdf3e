"""Per-user workspaces under HARNESS_WORKSPACES.

One workspace per user, not per conversation: it is "that person's own workspace", the
way a developer keeps one checkout across many chats; files the agent made yesterday are
there today, in any conversation. Directory names are the user's numeric id, never a
user-chosen string.

When the server runs as root, each user's workspace belongs to a uid of that user's own
(``HARNESS_SANDBOX_UID_BASE`` + user id): the bash sandbox runs as it and the file tools
act with it (``setfsuid``), so the kernel keeps one user's processes, process limit
(RLIMIT_NPROC counts per uid) and files apart from another's, and from the server's.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from django.conf import settings

from agent.core.tools import Workspace
from agent.server import storage


def workspace_path(user_id: int) -> Path:
    return Path(settings.HARNESS_WORKSPACES) / str(int(user_id))


def sandbox_ids(user_id: int) -> tuple[int, int] | None:
    """The (uid, gid) a root server gives this user's workspace and sandbox; None when the
    server is not root (it cannot give files away, and the sandbox runs as the server)."""
    if os.geteuid() != 0:
        return None
    uid = settings.HARNESS_SANDBOX_UID_BASE + int(user_id)
    return uid, uid


def workspace_for(user_id: int) -> Workspace:
    """The user's workspace, created on first use. Blocking: call it from a thread."""
    path = workspace_path(user_id)
    ids = sandbox_ids(user_id)
    parent = path.parent
    if not parent.is_dir():
        parent.mkdir(parents=True, exist_ok=True)
        # Users' sandboxes may pass through but not list their neighbours.
        os.chmod(parent, 0o711)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    quota_mb = None
    if ids is not None:
        _own(path, *ids)
        # Before the Workspace opens its root: it must hold the mounted, size-limited file
        # system (agent/server/storage.py), not the directory beneath it.
        quota_mb = storage.prepare(user_id, path, ids)
    workspace = Workspace(path)
    workspace.quota_mb = quota_mb  # the bash tool names it when a command fills the disk
    return workspace


def _own(path: Path, uid: int, gid: int) -> None:
    """Give the workspace to the user's uid. A workspace made by an older release (owned
    by ``nobody``, shared by every user) is re-owned entry by entry, walking descriptors
    and never following a symlink, so a link planted in it cannot redirect the chown."""
    st = os.stat(path, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"workspace {path} is not a directory")
    if (st.st_uid, st.st_gid) == (uid, gid):
        return
    for _, dirnames, filenames, dirfd in os.fwalk(path, follow_symlinks=False):
        for name in dirnames + filenames:
            try:
                os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)
            except FileNotFoundError:
                continue
    os.chown(path, uid, gid, follow_symlinks=False)
    os.chmod(path, 0o700)
