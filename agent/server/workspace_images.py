"""Workspace images: one sparse ext4 file per user under ``<HARNESS_WORKSPACES>/.images``,
of ``HARNESS_WORKSPACE_QUOTA_MB``; made, grown (never shrunk), mounted, and filled from a
plain workspace an older release made (agent/server/storage.py says when).

Everything here blocks (mkfs, copying): call it from a thread, never the event loop.
"""

from __future__ import annotations

import contextlib
import fcntl
import filecmp
import logging
import os
import shutil
import stat
from pathlib import Path

from django.conf import settings

from agent.server.mounts import StorageError, mount, run, tool, umount

log = logging.getLogger(__name__)

MIB = 1024 * 1024
IMAGES = ".images"


def quota_bytes() -> int:
    return settings.HARNESS_WORKSPACE_QUOTA_MB * MIB


def image_path(user_id: int) -> Path:
    return Path(settings.HARNESS_WORKSPACES) / IMAGES / f"{int(user_id)}.ext4"


def images_dir() -> Path:
    images = Path(settings.HARNESS_WORKSPACES) / IMAGES
    if not images.is_dir():
        images.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(images, 0o700)  # the images are users' raw file systems: the server's only
    return images


@contextlib.contextmanager
def locked(user_id: int):
    """One preparer per workspace on this host (processes and threads alike: each open
    file description is its own flock holder)."""
    lock = images_dir() / f"{int(user_id)}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def make_image(image: Path, uid: int, gid: int) -> None:
    """A sparse ext4 image of the quota's size; no reserved blocks (-m 0), so the user
    gets all of it and root no more; its root directory is the user's."""
    with open(image, "wb") as f:
        f.truncate(quota_bytes())
    run(tool("mkfs.ext4"), "-q", "-F", "-m", "0", "-E", f"root_owner={uid}:{gid}", str(image))


def tidy_fresh_root(root: Path) -> None:
    # lost+found is fsck's (it re-creates it when it needs one); the user need not see it.
    with contextlib.suppress(OSError):
        (root / "lost+found").rmdir()
    os.chmod(root, 0o700)


def _loop_device(image: Path) -> str | None:
    out = run(tool("losetup"), "-n", "-O", "NAME", "-j", str(image)).split()
    return out[0] if out else None


def grow(image: Path, user_id: int) -> None:
    """Grow a mounted image to the quota, online when the kernel allows it (some
    sandboxed kernels refuse the resize ioctl): the file grows either way, and an image
    whose file system is smaller than its file grows when next mounted (``_mount_image``).
    A smaller quota never shrinks an image (that needs it unmounted and checked)."""
    size = os.stat(image).st_size
    wanted = quota_bytes()
    if size > wanted:
        if user_id not in _shrink_noted:
            _shrink_noted.add(user_id)
            log.warning(
                "workspace %s keeps its %d MB image: HARNESS_WORKSPACE_QUOTA_MB (%d) is "
                "smaller, and images are never shrunk (docs/DEPLOY.md)",
                user_id, size // MIB, wanted // MIB,
            )  # fmt: skip
        return
    if size == wanted:
        return
    device = _loop_device(image)
    if device is None:
        raise StorageError(f"{image} is mounted but has no loop device")
    os.truncate(image, wanted)
    try:
        run(tool("losetup"), "-c", device)  # the loop device learns the file's new size
        run(tool("resize2fs"), device)
    except StorageError as exc:
        log.warning(
            "workspace %s: could not grow its mounted image (%s); it grows to %d MB when "
            "next mounted", user_id, exc, wanted // MIB,
        )  # fmt: skip
        return
    log.info("workspace %s grew from %d MB to %d MB", user_id, size // MIB, wanted // MIB)


def _fs_bytes(image: Path) -> int:
    """The size of the file system in an (unmounted) image, from its superblock."""
    fields = {}
    for line in run(tool("dumpe2fs"), "-h", str(image)).splitlines():
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    return int(fields["Block count"]) * int(fields["Block size"])


def mount_image(image: Path, target: Path) -> None:
    """Mount an existing image, first growing it (offline) to a larger quota."""
    if os.stat(image).st_size < quota_bytes():
        os.truncate(image, quota_bytes())
    if _fs_bytes(image) < os.stat(image).st_size:
        # resize2fs wants a freshly checked file system; -p repairs only what is safe.
        run(tool("e2fsck"), "-f", "-p", str(image), ok=(0, 1))  # 1: errors fixed
        run(tool("resize2fs"), str(image))
        log.info("workspace image %s grew to %d MB", image.name, quota_bytes() // MIB)
        mount(image, target)
        with contextlib.suppress(OSError):  # e2fsck made one; the user need not see it
            (target / "lost+found").rmdir()
        return
    mount(image, target)


_shrink_noted: set[int] = set()


def quota_mb_of(user_id: int) -> int:
    """The size the user's workspace is limited to (its image's, which never shrinks)."""
    with contextlib.suppress(OSError):
        return max(os.stat(image_path(user_id)).st_size // MIB, 1)
    return settings.HARNESS_WORKSPACE_QUOTA_MB


def migrate(user_id: int, path: Path, image: Path, ids: tuple[int, int]) -> None:
    """Move a plain workspace (an older release's) into a new image: copy preserving
    ownership, modes, times and links; compare every entry; only then swap the image in and
    delete the old copy. On any failure the plain workspace is left exactly as it was."""
    fresh = image.with_name(image.name + ".new")
    staging = image.with_name(f"{int(user_id)}.migrating")
    make_image(fresh, *ids)
    staging.mkdir(mode=0o700, exist_ok=True)
    mounted = False
    try:
        mount(fresh, staging)
        mounted = True
        tidy_fresh_root(staging)
        # "src/." copies the contents and the root directory's own attributes.
        run(shutil.which("cp") or "/bin/cp", "-a", f"{path}/.", f"{staging}/")
        _verify_copy(path, staging)
        umount(staging)
        mounted = False
    except Exception as exc:
        if mounted:
            with contextlib.suppress(StorageError):
                umount(staging)
        with contextlib.suppress(OSError):
            fresh.unlink()
        with contextlib.suppress(OSError):
            staging.rmdir()
        raise StorageError(
            f"could not move workspace {path} into a {settings.HARNESS_WORKSPACE_QUOTA_MB} MB "
            f"image (its files are untouched; a larger HARNESS_WORKSPACE_QUOTA_MB may be "
            f"needed): {exc}"
        ) from exc
    staging.rmdir()
    os.replace(fresh, image)
    # Swap: the old directory moves aside (same file system: an atomic rename), the image
    # is mounted in its place; the old copy goes only once the mount is there.
    old = _leftover(user_id)
    os.rename(path, old)
    path.mkdir(mode=0o700)
    os.chown(path, *ids)
    mount(image, path)
    shutil.rmtree(old)
    log.info("workspace %s moved into its %d MB image", user_id, quota_bytes() // MIB)


def _leftover(user_id: int) -> Path:
    return Path(settings.HARNESS_WORKSPACES) / IMAGES / f"{int(user_id)}.premigration"


def remove_leftover(user_id: int) -> None:
    # A migration that crashed after the swap: its copy is verified and mounted, the
    # old directory is what remains to delete.
    old = _leftover(user_id)
    if old.exists():
        shutil.rmtree(old)


def _verify_copy(source: Path, copy: Path) -> None:
    """Every entry of ``source`` is in ``copy`` with the same type, mode, owner, size,
    link target and bytes; raises StorageError naming the first difference."""
    for dirpath, dirnames, filenames in os.walk(source):
        for name in dirnames + filenames:
            a = Path(dirpath) / name
            b = copy / a.relative_to(source)
            try:
                sa, sb = os.lstat(a), os.lstat(b)
            except OSError as exc:
                raise StorageError(f"{b} is missing from the copy: {exc}") from exc
            same = (
                stat.S_IFMT(sa.st_mode) == stat.S_IFMT(sb.st_mode)
                and stat.S_IMODE(sa.st_mode) == stat.S_IMODE(sb.st_mode)
                and (sa.st_uid, sa.st_gid) == (sb.st_uid, sb.st_gid)
            )
            if same and stat.S_ISLNK(sa.st_mode):
                same = os.readlink(a) == os.readlink(b)
            elif same and stat.S_ISREG(sa.st_mode):
                same = sa.st_size == sb.st_size and filecmp.cmp(a, b, shallow=False)
            if not same:
                raise StorageError(f"{b} differs from {a} after copying")
