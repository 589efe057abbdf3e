"""Workspace confinement: every file tool opens paths through here.

Paths are resolved to real paths (symlinks and ``..`` included) and compared as paths, never
as string prefixes (the MCP filesystem CVE-2025-53110 bug). After opening, the descriptor's
own location is read back from /proc, so a path swapped for a symlink between the check and
the open is still caught. Files with more than one hard link are refused: a hard link is
indistinguishable from the outside file it may point at.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

OUTSIDE = "path is outside the workspace"


class PathError(Exception):
    """A path was refused or could not be opened; the message is safe to show the model."""


_ERRNO_MESSAGES = {
    errno.ENOENT: "file not found",
    errno.ENOTDIR: "not a directory",
    errno.EISDIR: "path is a directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ELOOP: OUTSIDE,  # O_NOFOLLOW met a symlink swapped in after the check
    errno.ENAMETOOLONG: "path is too long",
}


def os_error_message(exc: OSError) -> str:
    return _ERRNO_MESSAGES.get(exc.errno, exc.strerror or "cannot open path")


class Workspace:
    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(os.path.realpath(root))
        if not self.root.is_dir():
            raise ValueError(f"workspace {root} is not a directory")

    def contains(self, real: str | os.PathLike[str]) -> bool:
        return Path(real).is_relative_to(self.root)

    def resolve(self, path: str) -> Path:
        """The real path for ``path`` (relative to the root, or absolute inside it)."""
        if not isinstance(path, str) or path == "":
            raise PathError("path must be a non-empty string")
        if "\x00" in path:
            raise PathError("path contains a NUL byte")
        candidate = Path(path) if os.path.isabs(path) else self.root / path
        try:
            real = Path(os.path.realpath(candidate))
        except (OSError, ValueError) as exc:
            raise PathError("invalid path") from exc
        if not self.contains(real):
            raise PathError(OUTSIDE)
        return real

    def relative(self, real: str | os.PathLike[str]) -> str:
        return os.path.relpath(real, self.root)

    def open(self, path: str, flags: int, mode: int = 0o644) -> tuple[int, Path]:
        """Open ``path`` confined to the workspace; returns (fd, real path)."""
        real = self.resolve(path)
        try:
            fd = os.open(real, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        except OSError as exc:
            raise PathError(os_error_message(exc)) from exc
        try:
            self._verify_fd(fd)
            if flags & os.O_CREAT:
                self._adopt(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd, real

    def _adopt(self, target: int | str) -> None:
        """Give what a root server creates to the workspace's owner, so the sandbox (which
        runs as that owner) can change it too."""
        if os.geteuid() != 0:
            return
        st = os.stat(self.root)
        if st.st_uid == 0:
            return
        if isinstance(target, int):
            os.fchown(target, st.st_uid, st.st_gid)
        else:
            os.chown(target, st.st_uid, st.st_gid, follow_symlinks=False)

    def _verify_fd(self, fd: int) -> None:
        try:
            actual = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # no /proc: the realpath check above is all we have
            actual = None
        if actual is not None and not self.contains(actual):
            raise PathError(OUTSIDE)
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            raise PathError("file has several hard links; refusing it")

    def makedirs_for(self, path: str) -> None:
        """Create the parent directories of ``path`` inside the workspace."""
        real = self.resolve(path)
        parent = real.parent
        if not self.contains(parent):
            raise PathError(OUTSIDE)
        try:
            missing = []
            probe = parent
            while not probe.exists() and self.contains(probe):
                missing.append(probe)
                probe = probe.parent
            parent.mkdir(parents=True, exist_ok=True)
            for created in missing:
                self._adopt(str(created))
        except OSError as exc:
            raise PathError(os_error_message(exc)) from exc
        # mkdir may have followed a symlink planted meanwhile: check where it really went.
        if not self.contains(os.path.realpath(parent)):
            raise PathError(OUTSIDE)
