"""Workspace storage: a size-limited file system per workspace, so one user cannot fill the
disk the database and the server's state live on.

``HARNESS_WORKSPACE_STORAGE``:

- ``loop``: each workspace is a sparse ext4 image, ``<HARNESS_WORKSPACES>/.images/<id>.ext4``
  of ``HARNESS_WORKSPACE_QUOTA_MB``, loop-mounted (``nosuid,nodev``) on the workspace
  directory. The kernel enforces the size: a write past it fails with ENOSPC inside that
  workspace, and nothing else on the host notices. Needs root, ``/dev/loop-control`` and
  e2fsprogs/util-linux; the image's root directory belongs to the user's sandbox uid.
- ``plain``: workspaces are plain directories under ``HARNESS_WORKSPACES`` (no quota: the
  operator puts that root on a file system of its own, or enforces one there).
- ``auto`` (default): ``loop`` when it can work, else ``plain`` with a warning at start-up
  when the workspaces share a file system with the database or ``var/``.

Several server processes on one host may prepare the same workspace at once: the work is
done under an exclusive ``flock`` of ``.images/<id>.lock``, and every step checks what is
already there, so it is idempotent, and a reboot (images kept, mounts gone) re-mounts on
first use. An image must never be mounted by two hosts (ext4 is not a cluster file
system): ``auto`` never chooses ``loop`` on a network file system (docs/DEPLOY.md).

Everything here blocks (mkfs, mount, copying): call it from a thread, never the event loop.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from agent.server.mounts import (  # noqa: F401 (existing, mounts, unmount_all: this module's API)
    TOOLS,
    StorageError,
    existing,
    fs_type,
    mount,
    mounts,
    tool,
    unmount_all,
)
from agent.server.workspace_images import (
    grow,
    image_path,
    locked,
    make_image,
    migrate,
    mount_image,
    quota_bytes,
    quota_mb_of,
    remove_leftover,
    tidy_fresh_root,
)

log = logging.getLogger(__name__)

MODES = ("auto", "loop", "plain")
# Where a loop image must not live: a file system other hosts may mount too.
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "9p", "lustre",
              "gpfs", "beegfs", "afs", "fuse.sshfs", "fuse.glusterfs", "fuse.s3fs")  # fmt: skip


# -- mode ------------------------------------------------------------------------------


def loop_unsupported(root: Path | None = None) -> str | None:
    """Why loop storage cannot work here, or None when it can."""
    if os.geteuid() != 0:
        return "the server is not root (loop mounts need root)"
    if not os.path.exists("/dev/loop-control"):
        return "there is no /dev/loop-control (no loop devices in this container)"
    missing = [name for name in TOOLS if tool(name) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install e2fsprogs util-linux mount)"
    fstype = fs_type(root if root is not None else Path(settings.HARNESS_WORKSPACES))
    if fstype in NETWORK_FS or fstype.startswith("fuse"):
        return f"HARNESS_WORKSPACES is on a {fstype} file system, which other hosts may mount"
    return None


_support: dict[tuple[str, str], str | None] = {}


def mode() -> str:
    """``loop`` or ``plain``: the storage workspaces get. Raises ImproperlyConfigured when
    ``loop`` is asked for and cannot work (start-up checks it too)."""
    wanted = settings.HARNESS_WORKSPACE_STORAGE
    if wanted == "plain":
        return "plain"
    # Asked on every workspace_for: the answer (tools, devices, file system type) is kept
    # per setting, so a settings override (tests) is a new question.
    key = (wanted, str(settings.HARNESS_WORKSPACES))
    if key not in _support:
        _support[key] = loop_unsupported()
    reason = _support[key]
    if reason is None:
        return "loop"
    if wanted == "loop":
        raise ImproperlyConfigured(f"HARNESS_WORKSPACE_STORAGE=loop cannot work: {reason}")
    return "plain"


def check_at_startup() -> None:
    """Fail fast on an impossible ``loop``; say once when ``auto`` fell back to plain
    directories on the disk the server writes its state to."""
    chosen = mode()
    if chosen == "loop" or settings.HARNESS_WORKSPACE_STORAGE != "auto":
        return
    root = Path(settings.HARNESS_WORKSPACES)
    shared = sorted({str(p) for p in server_state_dirs() if _device(p) == _device(root)})
    if shared:
        log.warning(
            "Workspaces (%s) are plain directories on the disk the server writes to (%s), "
            "without a quota: a user who fills their workspace fills that disk, and the "
            "database fails for everyone. Workspace quotas need root and loop devices (%s); "
            "or put HARNESS_WORKSPACES on a file system of its own (docs/DEPLOY.md).",
            root, ", ".join(shared), loop_unsupported(),
        )  # fmt: skip


def server_state_dirs() -> list[Path]:
    """Where the server writes its own state: var/ and, with SQLite, the database's dir."""
    dirs = [Path(settings.VAR_DIR)]
    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        dirs.append(Path(str(database["NAME"])).parent)
    return dirs


def _device(path: Path) -> int:
    return os.stat(existing(path)).st_dev


def prepare(user_id: int, path: Path, ids: tuple[int, int] | None) -> int | None:
    """Give the workspace at ``path`` (an existing directory) its storage. Returns its
    quota in MB with loop storage, None with plain directories. Blocking."""
    if mode() != "loop":
        return None
    if ids is None:  # loop storage implies a root server, which always has ids
        raise StorageError("loop storage needs the workspace's sandbox uid")
    image = image_path(user_id)
    if os.path.ismount(path) and os.path.exists(image) and os.stat(image).st_size >= quota_bytes():
        return quota_mb_of(user_id)  # the common case: mounted, at size; no lock needed
    with locked(user_id):
        if not os.path.ismount(path):
            _mount_workspace(user_id, Path(path), image, ids)
        grow(image, user_id)
        remove_leftover(user_id)
    return quota_mb_of(user_id)


def _mount_workspace(user_id: int, path: Path, image: Path, ids: tuple[int, int]) -> None:
    """Mount the image on ``path`` (under the lock, ``path`` not a mount point), making it
    first, and moving in the files of a workspace an older release made."""
    with os.scandir(path) as entries:
        has_files = any(True for _ in entries)
    if image.exists():
        if has_files:
            # Mounting would hide these files, and merging could overwrite the image's:
            # a person must look (the error names both).
            raise StorageError(
                f"workspace {path} has files of its own and an image {image}; move the "
                "files into the mounted image (or away), then retry"
            )
        mount_image(image, path)
        return
    if has_files:
        migrate(user_id, path, image, ids)
        return
    fresh = image.with_name(image.name + ".new")  # a crash mid-mkfs leaves only this
    make_image(fresh, *ids)
    os.replace(fresh, image)
    mount(image, path)
    tidy_fresh_root(path)
