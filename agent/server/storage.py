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

import contextlib
import fcntl
import filecmp
import logging
import os
import shutil
import stat
import subprocess
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

log = logging.getLogger(__name__)

MODES = ("auto", "loop", "plain")
MIB = 1024 * 1024
IMAGES = ".images"
TOOLS = ("mkfs.ext4", "mount", "umount", "losetup", "resize2fs", "e2fsck", "dumpe2fs")
# Where a loop image must not live: a file system other hosts may mount too.
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "9p", "lustre",
              "gpfs", "beegfs", "afs", "fuse.sshfs", "fuse.glusterfs", "fuse.s3fs")  # fmt: skip
TOOL_TIMEOUT = 600  # a migration copies a workspace; everything else takes well under a second


class StorageError(RuntimeError):
    """A workspace could not be given its storage; the message is for the operator's log
    and names no secret (paths under HARNESS_WORKSPACES only)."""


# -- mode ------------------------------------------------------------------------------


def _tool(name: str) -> str | None:
    # sbin is not on every service's PATH; the tools live there.
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def loop_unsupported(root: Path | None = None) -> str | None:
    """Why loop storage cannot work here, or None when it can."""
    if os.geteuid() != 0:
        return "the server is not root (loop mounts need root)"
    if not os.path.exists("/dev/loop-control"):
        return "there is no /dev/loop-control (no loop devices in this container)"
    missing = [name for name in TOOLS if _tool(name) is None]
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


def existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor (for stat and statvfs)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _device(path: Path) -> int:
    return os.stat(existing(path)).st_dev


# -- mounts ------------------------------------------------------------------------------


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal.
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field


def mounts() -> list[tuple[str, str, str]]:
    """(mount point, file system type, source) of this process's mount namespace."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as info:
        for line in info:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) >= 5 and len(tail) >= 2:
                found.append((_unescape(fields[4]), tail[0], _unescape(tail[1])))
    return found


def fs_type(path: Path) -> str:
    """The type of the file system ``path`` (or its nearest existing ancestor) is on."""
    target = str(existing(Path(path)).resolve())
    best, kind = "", ""
    for point, fstype, _ in mounts():
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fstype
    return kind


def _run(*argv: str, ok: tuple[int, ...] = (0,)) -> str:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StorageError(f"{argv[0]} failed: {exc}") from exc
    if done.returncode not in ok:
        detail = (done.stderr or done.stdout).strip()[-500:]
        raise StorageError(f"{' '.join(argv)} failed ({done.returncode}): {detail}")
    return done.stdout


def _mount(image: Path, target: Path) -> None:
    # -t ext4: never let mount probe for another type. nosuid, nodev: nothing in a workspace
    # can gain privileges or reach a device. Loop devices are freed on unmount (autoclear).
    _run(_tool("mount"), "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", str(image), str(target))


def _umount(target: Path) -> None:
    _run(_tool("umount"), str(target))


def unmount_all(root: Path) -> list[str]:
    """Unmount every mount at or below ``root``, deepest first (tests, decommissioning).
    A mount still in use (an open descriptor) is detached lazily: it disappears from the
    tree now and its loop device is freed when the last user lets go."""
    root_s = str(Path(root).resolve())
    points = [p for p, _, _ in mounts() if p == root_s or p.startswith(root_s + "/")]
    done = []
    for point in sorted(set(points), key=len, reverse=True):
        umount = _tool("umount") or "umount"
        if subprocess.run([umount, point], capture_output=True, check=False).returncode:
            subprocess.run([umount, "-l", point], capture_output=True, check=False)
        done.append(point)
    return done


# -- images ------------------------------------------------------------------------------


def quota_bytes() -> int:
    return settings.HARNESS_WORKSPACE_QUOTA_MB * MIB


def image_path(user_id: int) -> Path:
    return Path(settings.HARNESS_WORKSPACES) / IMAGES / f"{int(user_id)}.ext4"


def _images_dir() -> Path:
    images = Path(settings.HARNESS_WORKSPACES) / IMAGES
    if not images.is_dir():
        images.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(images, 0o700)  # the images are users' raw file systems: the server's only
    return images


@contextlib.contextmanager
def _locked(user_id: int):
    """One preparer per workspace on this host (processes and threads alike: each open
    file description is its own flock holder)."""
    lock = _images_dir() / f"{int(user_id)}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _make_image(image: Path, uid: int, gid: int) -> None:
    """A sparse ext4 image of the quota's size; no reserved blocks (-m 0), so the user
    gets all of it and root no more; its root directory is the user's."""
    with open(image, "wb") as f:
        f.truncate(quota_bytes())
    _run(_tool("mkfs.ext4"), "-q", "-F", "-m", "0", "-E", f"root_owner={uid}:{gid}", str(image))


def _tidy_fresh_root(root: Path) -> None:
    # lost+found is fsck's (it re-creates it when it needs one); the user need not see it.
    with contextlib.suppress(OSError):
        (root / "lost+found").rmdir()
    os.chmod(root, 0o700)


def _loop_device(image: Path) -> str | None:
    out = _run(_tool("losetup"), "-n", "-O", "NAME", "-j", str(image)).split()
    return out[0] if out else None


def _grow(image: Path, user_id: int) -> None:
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
        _run(_tool("losetup"), "-c", device)  # the loop device learns the file's new size
        _run(_tool("resize2fs"), device)
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
    for line in _run(_tool("dumpe2fs"), "-h", str(image)).splitlines():
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    return int(fields["Block count"]) * int(fields["Block size"])


def _mount_image(image: Path, target: Path) -> None:
    """Mount an existing image, first growing it (offline) to a larger quota."""
    if os.stat(image).st_size < quota_bytes():
        os.truncate(image, quota_bytes())
    if _fs_bytes(image) < os.stat(image).st_size:
        # resize2fs wants a freshly checked file system; -p repairs only what is safe.
        _run(_tool("e2fsck"), "-f", "-p", str(image), ok=(0, 1))  # 1: errors fixed
        _run(_tool("resize2fs"), str(image))
        log.info("workspace image %s grew to %d MB", image.name, quota_bytes() // MIB)
        _mount(image, target)
        with contextlib.suppress(OSError):  # e2fsck made one; the user need not see it
            (target / "lost+found").rmdir()
        return
    _mount(image, target)


_shrink_noted: set[int] = set()


def quota_mb_of(user_id: int) -> int:
    """The size the user's workspace is limited to (its image's, which never shrinks)."""
    with contextlib.suppress(OSError):
        return max(os.stat(image_path(user_id)).st_size // MIB, 1)
    return settings.HARNESS_WORKSPACE_QUOTA_MB


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
    with _locked(user_id):
        if not os.path.ismount(path):
            _mount_workspace(user_id, Path(path), image, ids)
        _grow(image, user_id)
        _remove_leftover(user_id)
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
        _mount_image(image, path)
        return
    if has_files:
        _migrate(user_id, path, image, ids)
        return
    fresh = image.with_name(image.name + ".new")  # a crash mid-mkfs leaves only this
    _make_image(fresh, *ids)
    os.replace(fresh, image)
    _mount(image, path)
    _tidy_fresh_root(path)


def _migrate(user_id: int, path: Path, image: Path, ids: tuple[int, int]) -> None:
    """Move a plain workspace (an older release's) into a new image: copy preserving
    ownership, modes, times and links; compare every entry; only then swap the image in and
    delete the old copy. On any failure the plain workspace is left exactly as it was."""
    fresh = image.with_name(image.name + ".new")
    staging = image.with_name(f"{int(user_id)}.migrating")
    _make_image(fresh, *ids)
    staging.mkdir(mode=0o700, exist_ok=True)
    mounted = False
    try:
        _mount(fresh, staging)
        mounted = True
        _tidy_fresh_root(staging)
        # "src/." copies the contents and the root directory's own attributes.
        _run(shutil.which("cp") or "/bin/cp", "-a", f"{path}/.", f"{staging}/")
        _verify_copy(path, staging)
        _umount(staging)
        mounted = False
    except Exception as exc:
        if mounted:
            with contextlib.suppress(StorageError):
                _umount(staging)
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
    _mount(image, path)
    shutil.rmtree(old)
    log.info("workspace %s moved into its %d MB image", user_id, quota_bytes() // MIB)


def _leftover(user_id: int) -> Path:
    return Path(settings.HARNESS_WORKSPACES) / IMAGES / f"{int(user_id)}.premigration"


def _remove_leftover(user_id: int) -> None:
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
