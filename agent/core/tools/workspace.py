"""Workspace confinement that the kernel enforces: every file tool opens paths through here.

A path string from the model or the page is never handed to the kernel whole. It is walked
one component at a time from a descriptor of the workspace root: each step is an
``openat(parent_fd, name, O_PATH | O_NOFOLLOW)`` on a descriptor already reached from the
root, so renaming a directory or swapping one for a symlink meanwhile changes only which
inode inside the workspace the walk lands on, never takes it outside. ``..`` pops the
walk's own stack (at the root it is refused), and a symlink is read and resolved by the
same walk: relative ones that stay inside are followed, absolute ones and ones that climb
above the root are refused. The last component is opened relative to its verified parent
with ``O_NOFOLLOW | O_NONBLOCK`` and compared (device, inode) with what the walk saw, so
what is read is exactly what was checked, and nothing that is not a regular file or a
directory (a FIFO, a socket, a device) is ever opened for I/O. Files with
more than one hard link are refused for reading: a hard link is indistinguishable from
the outside file it may point at. Writes never write into an existing file: they replace it
by a new one renamed over the name, so a failure leaves the old content whole.

The file system calls block, so callers run them in ``fileio``'s worker threads, where a
root server also takes on the workspace owner's identity (``setfsuid``): the kernel then
refuses anything the owner could not do, and what is created belongs to the owner.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent.core.tools.oserrors import ERRNO_MESSAGES, node_kind, os_error_message

OUTSIDE = "path is outside the workspace"
SANDBOX_ROOT = "/workspace"  # where the bash sandbox shows the workspace
MAX_SYMLINKS = 40  # as the kernel's own limit
MAX_RETRIES = 8  # a leaf that keeps changing between the check and the open
MAX_COMPONENTS = 1024  # components one walk may take, those symlinks add included
_DIR_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC


class PathError(Exception):
    """A path was refused or could not be opened; the message is safe to show the model
    (it never names a host path)."""


@dataclass(frozen=True, slots=True)
class Opened:
    """An open descriptor and where it is, relative to the workspace root ("." for it)."""

    fd: int
    rel: str


class _Walk:
    """Where the walk is: one descriptor of the current directory and the names that lead
    to it from the root. Only that one descriptor is held, whatever the depth (a deep
    path, or symlinks that each lead thousands of levels down, must not use up the
    process's descriptor table); ``..`` walks the names again from the root rather than
    asking the kernel for the parent, so a directory moved meanwhile cannot lead above
    the root."""

    def __init__(self, root_fd: int):
        self._root_fd = root_fd  # the workspace's, not owned by the walk
        self.fd = os.dup(root_fd)
        self.names: list[str] = []

    def down(self, fd: int, name: str) -> None:
        os.close(self.fd)
        self.fd = fd
        self.names.append(name)

    def up(self) -> None:
        if not self.names:
            raise PathError(OUTSIDE)
        self.names.pop()
        fd = os.dup(self._root_fd)
        try:
            for name in self.names:
                below = os.open(name, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = below
        except OSError:
            os.close(fd)
            raise PathError("the path changed while it was opened; try again") from None
        os.close(self.fd)
        self.fd = fd

    def rel(self, leaf: str | None = None) -> str:
        parts = self.names + ([leaf] if leaf else [])
        return "/".join(parts) or "."

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Workspace:
    quota_mb: int | None = None  # the size limit the deployment enforces, when it has one
    # A server that dropped root reaches the workspace only through its user's sandbox
    # (agent/sandbox/client.py): file work, tools and bash all go there.
    sandbox = None
    hidden: tuple[str, ...] = ()  # names in the root no path may enter (the CLI homes)
    # bwrap arguments the local bash sandbox adds (a server without a broker): what it
    # hides, or a project worktree's repository (agent/sandbox/project_mounts.py).
    sandbox_binds: tuple[str, ...] = ()
    # With a network policy of ``proxy``: an async callable giving the path of the egress
    # proxy's Unix socket for this workspace's sandboxes (None: no network at all).
    egress = None
    # Where bash's ``background`` commands run (agent/core/tools/background.py ``Jobs``;
    # None: bash offers no background).
    background = None

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(os.path.realpath(root))
        # Opened once, by the server itself: the owner's identity, which file work takes
        # on, may have no right to pass through the root's ancestors (a 0700 home). The
        # root's own path is the server's (var/workspaces/<id>, in a directory users cannot
        # write), so opening it by name is safe; everything below goes by descriptor.
        try:
            self._root_fd = os.open(
                self.root, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            )
        except OSError:
            raise ValueError(f"workspace {root} is not a directory") from None

    def close(self) -> None:
        fd, self._root_fd = getattr(self, "_root_fd", -1), -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()

    # -- identity --------------------------------------------------------------------

    def owner(self) -> tuple[int, int] | None:
        """The (uid, gid) file work takes on: the root's owner when a root server works in
        a workspace that belongs to someone else; None when no identity change is needed
        (the server is not root, or the workspace is root's own, as in print mode)."""
        if os.geteuid() != 0:
            return None
        st = os.fstat(self._root_fd)
        return None if st.st_uid == 0 else (st.st_uid, st.st_gid)

    # -- paths ------------------------------------------------------------------------

    def relative_parts(self, path: str) -> list[str]:
        """The components of ``path`` below the root; absolute paths must name the root
        (as the host or the sandbox sees it). ``..`` is kept: the walk resolves it."""
        if not isinstance(path, str) or path == "":
            raise PathError("path must be a non-empty string")
        if "\x00" in path:
            raise PathError("path contains a NUL byte")
        try:
            path.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a lone surrogate (JSON's "\ud800") names no file
            raise PathError("path is not valid Unicode") from None
        if path.startswith("/"):
            for prefix in (str(self.root), SANDBOX_ROOT):
                if path == prefix or path.startswith(prefix + "/"):
                    path = path[len(prefix) :]
                    break
            else:
                raise PathError(OUTSIDE)
        return [p for p in path.split("/") if p not in ("", ".")]

    def _walk(self, path: str, *, make_parents: bool = False) -> tuple[_Walk, str | None]:
        """Walk ``path`` from the root. Returns the walk, ending in the directory that
        holds the last component, and that component's name (None when the path names a
        directory reached by the walk itself, such as "." or "a/.."). Symlinks are
        resolved by the walk, the last component's too (a dangling one gives the name it
        points at, to be created)."""
        parts = self.relative_parts(path)
        if len(parts) > MAX_COMPONENTS:  # before any directory is made for it
            raise PathError("path is too deep")
        try:
            walk = _Walk(self._root_fd)
        except OSError as exc:
            raise PathError("the workspace is unavailable") from exc
        links = steps = 0
        try:
            while parts:
                steps += 1
                if steps > MAX_COMPONENTS:
                    raise PathError("path is too deep")
                name = parts.pop(0)
                if name == "..":
                    walk.up()
                    continue
                if name in self.hidden and not walk.names:
                    raise PathError(f"{name} is reserved for the workbench")
                try:
                    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=walk.fd)
                except FileNotFoundError:
                    if not parts:
                        return walk, name  # a leaf to create
                    if not make_parents:
                        raise
                    self._mkdir(walk.fd, name)
                    fd = os.open(name, _DIR_FLAGS, dir_fd=walk.fd)
                mode = os.fstat(fd).st_mode
                if stat.S_ISLNK(mode):
                    try:
                        target = os.readlink("", dir_fd=fd)  # the link we hold, not the name
                    finally:
                        os.close(fd)
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise PathError(ERRNO_MESSAGES[errno.ELOOP])
                    if target.startswith("/"):
                        raise PathError(OUTSIDE)
                    parts = [p for p in target.split("/") if p not in ("", ".")] + parts
                    continue
                if not parts:
                    os.close(fd)
                    return walk, name
                if not stat.S_ISDIR(mode):
                    os.close(fd)
                    raise PathError("not a directory")
                walk.down(fd, name)
            return walk, None
        except BaseException as exc:  # every exit but a return gives the descriptor back
            walk.close()
            if isinstance(exc, OSError):
                raise PathError(os_error_message(exc)) from exc
            raise

    @staticmethod
    def _mkdir(dir_fd: int, name: str) -> None:
        # Made meanwhile is fine: the O_NOFOLLOW | O_DIRECTORY open checks what it is.
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=dir_fd)

    # -- opening ----------------------------------------------------------------------

    def _retrying(self, attempt: Callable[[], Opened | None]) -> Opened:
        for _ in range(MAX_RETRIES):
            opened = attempt()
            if opened is not None:
                return opened
        raise PathError("the path kept changing while it was opened; try again")

    def open(self, path: str, *, directory: bool | None = False) -> Opened:
        """Open an existing file (``directory=False``), directory (True) or either (None),
        read-only (writes go through ``write``, which never opens the old file)."""
        return self._retrying(lambda: self._open_once(path, directory))

    def _open_once(self, path: str, directory: bool | None) -> Opened | None:
        walk, name = self._walk(path)
        try:
            if name is None:  # the walk's own directory
                if directory is False:
                    raise PathError("path is a directory")
                fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=walk.fd)
                return Opened(fd, walk.rel())
            return self._open_leaf(walk, name, directory)
        finally:
            walk.close()

    def _open_leaf(self, walk: _Walk, name: str, directory: bool | None) -> Opened | None:
        try:
            probe = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=walk.fd)
        except OSError as exc:
            raise PathError(os_error_message(exc)) from exc
        try:
            seen = os.fstat(probe)
        finally:
            os.close(probe)
        if stat.S_ISLNK(seen.st_mode):
            return None  # a symlink swapped in after the walk: walk again (it follows it)
        if stat.S_ISDIR(seen.st_mode):
            if directory is False:
                raise PathError("path is a directory")
            flags = os.O_RDONLY | os.O_DIRECTORY
        elif directory is True:
            raise PathError("not a directory")
        elif stat.S_ISREG(seen.st_mode):
            flags = os.O_RDONLY
        else:  # never opened for I/O: a FIFO's open blocks, a device's may act
            raise PathError(f"not a regular file ({node_kind(seen.st_mode)})")
        try:
            fd = os.open(
                name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC,
                dir_fd=walk.fd,
            )  # fmt: skip
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO, errno.ENOENT, errno.ENOTDIR):
                return None  # swapped since the probe: walk again
            raise PathError(os_error_message(exc)) from exc
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
            os.close(fd)
            return None
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            os.close(fd)
            raise PathError("file has several hard links; refusing it")
        return Opened(fd, walk.rel(name))

    def write(self, path: str, data: bytes, *, make_parents: bool = True) -> tuple[str, bool]:
        """Replace (or create) the file at ``path`` with ``data``, atomically: the bytes go
        to a new file beside it, created ``O_EXCL`` in the walk's verified directory and
        synced, which is then renamed over the name. A failure (a full quota, a crash)
        leaves the old file whole; a hard link or anything else that stood at the name is
        replaced, never written through. Returns (path from the root, whether it is new)."""
        walk, name = self._walk(path, make_parents=make_parents)
        try:
            if name is None:
                raise PathError("path is a directory")
            existing = self._probe(walk.fd, name)
            if existing is not None and stat.S_ISDIR(existing.st_mode):
                raise PathError("path is a directory")
            if existing is not None and not stat.S_ISREG(existing.st_mode):
                raise PathError(f"not a regular file ({node_kind(existing.st_mode)})")
            mode = stat.S_IMODE(existing.st_mode) & 0o777 if existing else 0o644
            self._replace(walk.fd, name, data, mode)
            return walk.rel(name), existing is None
        finally:
            walk.close()

    def remove(self, path: str) -> str:
        """Remove the file (or empty directory) at ``path``: unlinked by name in the walk's
        verified directory, so whatever stands at that name then (a file swapped for a
        symlink included) is what goes, never anything outside. Returns its path from the
        root."""
        walk, name = self._walk(path)
        try:
            if name is None:
                root = walk.rel() == "."
                raise PathError("cannot remove the workspace root" if root
                                else "name the directory without a trailing /")  # fmt: skip
            try:
                os.unlink(name, dir_fd=walk.fd)
            except IsADirectoryError:
                os.rmdir(name, dir_fd=walk.fd)
            return walk.rel(name)
        except OSError as exc:
            raise PathError(os_error_message(exc)) from exc
        finally:
            walk.close()

    @staticmethod
    def _probe(dir_fd: int, name: str) -> os.stat_result | None:
        try:
            fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PathError(os_error_message(exc)) from exc
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    @staticmethod
    def _replace(dir_fd: int, name: str, data: bytes, mode: int) -> None:
        temp = f".{name[:200]}.{secrets.token_hex(6)}.harness-tmp"
        try:
            fd = os.open(
                temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                mode, dir_fd=dir_fd,
            )  # fmt: skip
        except OSError as exc:
            raise PathError(os_error_message(exc)) from exc
        try:
            try:
                os.fchmod(fd, mode)  # the umask must not narrow an existing file's mode
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
            if isinstance(exc, OSError):
                if exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                    raise PathError("path is a directory") from exc
                raise PathError(os_error_message(exc)) from exc
            raise
