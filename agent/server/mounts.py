"""Mounts of workspace images: the mount table, the e2fsprogs/util-linux tools that make,
mount and unmount an image, and errors about them (agent/server/storage.py chooses when).

Everything here blocks: call it from a thread, never the event loop.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

TOOLS = ("mkfs.ext4", "mount", "umount", "losetup", "resize2fs", "e2fsck", "dumpe2fs")
TOOL_TIMEOUT = 600  # a migration copies a workspace; everything else takes well under a second


class StorageError(RuntimeError):
    """A workspace could not be given its storage; the message is for the operator's log
    and names no secret (paths under HARNESS_WORKSPACES only)."""


def tool(name: str) -> str | None:
    # sbin is not on every service's PATH; the tools live there.
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor (for stat and statvfs)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


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


def run(*argv: str, ok: tuple[int, ...] = (0,)) -> str:
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


def mount(image: Path, target: Path) -> None:
    # -t ext4: never let mount probe for another type. nosuid, nodev: nothing in a workspace
    # can gain privileges or reach a device. Loop devices are freed on unmount (autoclear).
    run(tool("mount"), "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", str(image), str(target))


def umount(target: Path) -> None:
    run(tool("umount"), str(target))


def unmount_all(root: Path) -> list[str]:
    """Unmount every mount at or below ``root``, deepest first (tests, decommissioning).
    A mount still in use (an open descriptor) is detached lazily: it disappears from the
    tree now and its loop device is freed when the last user lets go."""
    root_s = str(Path(root).resolve())
    points = [p for p, _, _ in mounts() if p == root_s or p.startswith(root_s + "/")]
    done = []
    for point in sorted(set(points), key=len, reverse=True):
        umount = tool("umount") or "umount"
        if subprocess.run([umount, point], capture_output=True, check=False).returncode:
            subprocess.run([umount, "-l", point], capture_output=True, check=False)
        done.append(point)
    return done
