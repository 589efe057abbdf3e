"""What the model is told of a failed file operation, and of a node's kind: never a host
path (an OSError's own text names the path it failed on)."""

from __future__ import annotations

import errno
import stat

ERRNO_MESSAGES = {
    errno.ENOENT: "file not found",
    errno.ENOTDIR: "not a directory",
    errno.EISDIR: "path is a directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ELOOP: "too many levels of symbolic links",
    errno.ENAMETOOLONG: "path is too long",
    errno.ENOSPC: "no space left in the workspace",
    errno.EDQUOT: "the workspace's disk quota is exhausted",
    errno.EROFS: "the workspace is read-only",
    errno.EFBIG: "file too large",
}


def os_error_message(exc: OSError) -> str:
    """A message for ``exc`` without its file name: OSError's str() names the host path."""
    return ERRNO_MESSAGES.get(exc.errno, exc.strerror or "cannot open path")


def node_kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"
