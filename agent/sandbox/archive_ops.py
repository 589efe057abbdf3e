"""Unpacking an uploaded archive as its owner: in the user's file host when the server has
dropped root, else in a file worker with the owner's identity.

To the host the upload is streamed, not sent whole: ``archive_open`` makes a file with no
name in the workspace (``O_TMPFILE``: on the user's own storage, so it counts against
their quota, and reachable by no path, so no process of theirs can change it between the
check and the unpacking), each ``archive_chunk`` appends the next piece (sent only once
the last one is answered), and ``archive_unpack`` checks the whole archive and unpacks it
into a new directory (agent/core/archives.py), refused whole with nothing kept. The file
goes when the upload ends either way, or when the host does.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import threading
from typing import BinaryIO

from agent.core.archive_formats import ArchiveError
from agent.core.archives import Limits, unpack
from agent.core.tools.workspace import PathError, Workspace

CHUNK = 4 << 20  # bytes per archive_chunk frame (well under the wire's MAX_BLOB)
MAX_OPEN = 4  # uploads in progress at once in one host
MAX_ENTRIES = 100_000
HOST_TIMEOUT = 600.0


class Upload:
    def __init__(self, root: Workspace, max_size: int):
        self.max_size = max_size
        self.size = 0
        self.fd = _nameless_file(str(root.root))


def _nameless_file(directory: str) -> int:
    try:
        return os.open(directory, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            raise PathError("cannot store the upload in the workspace") from None
    # A file system without O_TMPFILE: a name nobody can guess, gone at once.
    dir_fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        name = f".harness-upload-{secrets.token_hex(16)}"
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dir_fd)  # fmt: skip
        os.unlink(name, dir_fd=dir_fd)
        return fd
    finally:
        os.close(dir_fd)


class Uploads:
    """The uploads one host holds, by token."""

    def __init__(self):
        self._open: dict[str, Upload] = {}
        self._lock = threading.Lock()

    def open(self, workspace: Workspace, max_size) -> str:
        if type(max_size) is not int or max_size <= 0:
            raise PathError("an upload's size limit must be a positive integer")
        with self._lock:
            if len(self._open) >= MAX_OPEN:
                raise PathError("too many uploads are in progress; try again")
            token = secrets.token_hex(16)
            self._open[token] = Upload(workspace, max_size)
        return token

    def _get(self, token) -> Upload:
        with self._lock:
            upload = self._open.get(token) if isinstance(token, str) else None
        if upload is None:
            raise PathError("no such upload")
        return upload

    def chunk(self, token, offset, blob: bytes) -> int:
        upload = self._get(token)
        if offset != upload.size:
            raise PathError("upload chunks must come in order")
        if upload.size + len(blob) > upload.max_size:
            raise ArchiveError(f"is larger than the {upload.max_size:,} bytes an upload may be")
        view = memoryview(blob)
        try:
            while view:
                view = view[os.write(upload.fd, view) :]
        except OSError as exc:
            self.discard(token)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise ArchiveError("does not fit in the workspace") from None
            raise PathError("cannot store the upload in the workspace") from None
        upload.size += len(blob)
        return upload.size

    def discard(self, token) -> None:
        with self._lock:
            upload = self._open.pop(token, None) if isinstance(token, str) else None
        if upload is not None:
            os.close(upload.fd)

    def unpack(self, workspace: Workspace, token, dest, limits) -> dict:
        upload = self._get(token)
        try:
            with os.fdopen(os.dup(upload.fd), "rb") as archive:
                return unpack_into(workspace, archive, dest, limits)
        finally:
            self.discard(token)


UPLOADS = Uploads()


def run(workspace: Workspace, name: str, args: list, blob: bytes):
    """In the host: an ``archive_*`` operation's JSON result."""
    if name == "archive_open":
        return UPLOADS.open(workspace, *args)
    if name == "archive_chunk":
        return UPLOADS.chunk(*args, blob)
    if name == "archive_unpack":
        return UPLOADS.unpack(workspace, *args)
    if name == "archive_discard":
        return UPLOADS.discard(*args)
    raise ValueError(f"unknown operation {name!r}")


def _limits(limits) -> Limits:
    try:
        max_bytes, max_entries = int(limits["max_bytes"]), int(limits["max_entries"])
    except (TypeError, KeyError, ValueError):
        raise PathError("bad archive limits") from None
    if max_bytes <= 0 or not 0 < max_entries <= MAX_ENTRIES:
        raise PathError("bad archive limits")
    return Limits(max_bytes=max_bytes, max_entries=max_entries)


def unpack_into(workspace: Workspace, archive: BinaryIO, dest, limits) -> dict:
    """Unpack ``archive`` into ``dest``, a new directory whose parent exists in the
    workspace, within ``limits`` and the space the workspace has left. As the owner."""
    if not isinstance(dest, str):
        raise PathError("name the directory to unpack into")
    parent, _, leaf = dest.rstrip("/").rpartition("/")
    if leaf in ("", ".", "..") or "\x00" in leaf:
        raise PathError("name the directory to unpack into")
    checked = _limits(limits)
    opened = workspace.open(parent or ".", directory=True)
    try:
        vfs = os.fstatvfs(opened.fd)
        free = vfs.f_bavail * vfs.f_frsize
        if free < checked.max_bytes:
            checked = Limits(max_bytes=max(free, 1), max_entries=checked.max_entries)
        try:
            done = unpack(archive, opened.fd, leaf, checked)
        except FileExistsError:
            raise PathError(f"{dest} already exists") from None
        rel = leaf if opened.rel == "." else f"{opened.rel}/{leaf}"
        return {"path": rel, "entries": len(done.entries), "bytes": done.total,
                "stripped": done.stripped}  # fmt: skip
    finally:
        os.close(opened.fd)


def unpack_upload(workspace: Workspace, source: BinaryIO, dest: str, limits: dict,
                  max_size: int) -> dict:  # fmt: skip
    """On the server, blocking: the uploaded ``source`` (a seekable file, at most
    ``max_size`` bytes) unpacked into ``dest`` in the workspace, by its owner.
    ArchiveError when refused (nothing kept); PathError when the workspace failed."""
    if workspace.sandbox is None:
        from agent.core.tools.fileio import workers

        return workers.call(workspace, unpack_into, workspace, source, dest, limits,
                            timeout=HOST_TIMEOUT)  # fmt: skip
    return unpack_in_host(workspace.sandbox, source, dest, limits, max_size)


def unpack_in_host(sandbox, source: BinaryIO, dest: str, limits: dict, max_size: int) -> dict:
    """The same through the user's file host (``sandbox``: their ``UserSandbox``, or its view
    of a project's directory): the upload streamed to it in pieces, unpacked there."""
    token = sandbox.call("archive_open", [max_size])
    try:
        offset = 0
        while chunk := source.read(CHUNK):
            sandbox.call("archive_chunk", [token, offset], chunk)
            offset += len(chunk)
        return sandbox.call("archive_unpack", [token, dest, limits], timeout=HOST_TIMEOUT)
    finally:
        with contextlib.suppress(PathError, ArchiveError):
            sandbox.call("archive_discard", [token])  # gone already when unpacked
