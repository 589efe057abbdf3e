"""A user's workspace directory, made and given its storage by root (the broker, or a root
process that has no broker: print mode, tests). Names are numeric user ids, never a
user-chosen string; the walk below never follows a symlink."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from agent.sandbox import project_mounts
from agent.server import storage


def prepare(root: Path, user_id: int, ids: tuple[int, int]) -> int | None:
    """Make ``root/<user_id>``, give it to ``ids`` and its storage; its quota in MB (None
    with plain directories). Blocking."""
    if not root.is_dir():
        root.mkdir(parents=True, exist_ok=True)
        # Users' sandboxes may pass through but not list their neighbours.
        os.chmod(root, 0o711)
    path = root / str(int(user_id))
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    own(path, *ids)
    # Before anyone opens the root: it must hold the mounted, size-limited file system
    # (agent/server/storage.py), not the directory beneath it.
    quota = storage.prepare(user_id, path, ids)
    fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        project_mounts.ensure_dir(fd, ids)  # the projects: in the quota, out of sight
    finally:
        os.close(fd)
    return quota


def own(path: Path, uid: int, gid: int) -> None:
    """Give the workspace to the user's uid. A workspace made by an older release (owned
    by ``nobody``, or by root) is re-owned entry by entry, walking descriptors and never
    following a symlink, so a link planted in it cannot redirect the chown."""
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
