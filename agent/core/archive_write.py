"""Writing a checked archive plan (agent/core/archives.py) into a new directory, as if the
checks had missed something.

Every name is opened relative to a descriptor reached from the new directory's own, one
component at a time with ``O_NOFOLLOW``: no path is handed to the kernel whole, and a
symlink met on the way (planted meanwhile by another process of the same user) is an
error, never followed. Directories are made first, then files, created ``O_EXCL`` (never
written through an existing name), then hardlinks as copies of the files just written,
and symlinks last of all, so no entry is ever written after, or through, a link the
archive made. A file must produce exactly the bytes the plan counted. Any failure removes
the whole directory (``shutil.rmtree`` by descriptor, which never follows a link).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from typing import TYPE_CHECKING, BinaryIO

from agent.core.archive_formats import READ_ERRORS, ArchiveError
from agent.core.tools.oserrors import os_error_message

if TYPE_CHECKING:
    from agent.core.archives import Entry, Plan

CHUNK = 1 << 16
_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class _Dirs:
    """Descriptors of directories below the root, walked without following links; the
    last one is kept (entries come grouped by directory)."""

    def __init__(self, root: int):
        self.root = root
        self.path: str | None = None
        self.fd = -1

    def of(self, parts: list[str]) -> int:
        path = "/".join(parts)
        if path == self.path:
            return self.fd
        fd = os.dup(self.root)
        try:
            for part in parts:
                below = os.open(part, _DIR, dir_fd=fd)
                os.close(fd)
                fd = below
        except BaseException:
            os.close(fd)
            raise
        self.close()
        self.path, self.fd = path, fd
        return fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.path, self.fd = None, -1


def _split(path: str) -> tuple[list[str], str]:
    parts = path.split("/")
    return parts[:-1], parts[-1]


def _copy(source: BinaryIO, fd: int, entry: Entry) -> None:
    written = 0
    while chunk := source.read(CHUNK):
        written += len(chunk)
        if written > entry.size:
            break
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]
    if written != entry.size:
        raise ArchiveError("changed between its check and its unpacking", entry.member.name)


def _write_file(dirs: _Dirs, entry: Entry, source: BinaryIO) -> None:
    parent, leaf = _split(entry.path)
    fd = os.open(leaf, _NEW_FILE, entry.mode, dir_fd=dirs.of(parent))
    try:
        os.fchmod(fd, entry.mode)  # the umask must not narrow it
        _copy(source, fd, entry)
    finally:
        os.close(fd)


def _copy_of(dirs: _Dirs, entry: Entry) -> BinaryIO:
    """The file a hardlink names, as written a moment ago, opened without following."""
    parent, leaf = _split(entry.target)
    fd = os.open(leaf, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 dir_fd=dirs.of(parent))  # fmt: skip
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ArchiveError("is a hardlink whose file changed meanwhile", entry.member.name)
    return os.fdopen(fd, "rb")


def _write(plan: Plan, reader, root: int) -> None:
    dirs = _Dirs(root)
    try:
        for path in plan.directories():
            parent, leaf = _split(path)
            os.mkdir(leaf, 0o755, dir_fd=dirs.of(parent))
            made = os.open(leaf, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                           dir_fd=dirs.of(parent))  # fmt: skip
            try:
                os.fchmod(made, 0o755)
            finally:
                os.close(made)
        for entry in plan.entries:
            if entry.kind == "file":
                with reader.open(entry.member) as source:
                    _write_file(dirs, entry, source)
        for entry in plan.entries:
            if entry.kind == "hardlink":
                with _copy_of(dirs, entry) as source:
                    _write_file(dirs, entry, source)
        for entry in plan.entries:
            if entry.kind == "symlink":
                parent, leaf = _split(entry.path)
                os.symlink(entry.target, leaf, dir_fd=dirs.of(parent))
    finally:
        dirs.close()


def write_plan(plan: Plan, reader, parent_fd: int, name: str) -> None:
    """Make ``name`` in ``parent_fd`` (it must not exist) and write the plan into it; on
    any failure remove it whole. ArchiveError for what the archive or the disk caused."""
    os.mkdir(name, 0o700, dir_fd=parent_fd)  # FileExistsError: the caller's to choose again
    try:
        root = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                       dir_fd=parent_fd)  # fmt: skip
        try:
            _write(plan, reader, root)
            os.fchmod(root, 0o755)
        finally:
            os.close(root)
    except BaseException as exc:
        shutil.rmtree(name, dir_fd=parent_fd, ignore_errors=True)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise ArchiveError(f"does not fit in the workspace ({os_error_message(exc)})") from None
        if isinstance(exc, OSError):
            raise ArchiveError(f"could not be unpacked ({os_error_message(exc)})") from None
        if isinstance(exc, READ_ERRORS) and not isinstance(exc, ArchiveError):
            raise ArchiveError(f"cannot be read ({type(exc).__name__})") from None
        raise
