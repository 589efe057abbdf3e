"""Reading an uploaded ``.zip`` or ``.tar.gz`` entry by entry, trusting none of it.

Each format is told apart by its first bytes, never by the upload's name. A reader yields
``Member``s: the name as the archive spells it, what kind of node it would make (a device,
a FIFO, a socket or anything unknown comes out as a refusal, not a kind), its mode bits
and its link target; ``open`` gives a member's data as the decompressor actually produces
it. Sizes the archive declares are never used: the caller counts what it reads.

A ``.tar.gz`` is read through ``Bounded``, between the decompressor and ``tarfile``: one
read may not ask for more than ``MAX_READ`` (a pax or GNU long-name header says its own
length, and ``tarfile`` reads a header whole, into memory), and the decompressed stream may
not run past the bound the caller gives (an endless run of headers that make no entry).
Only the standard library: the per-user file host runs this without site-packages.
"""

from __future__ import annotations

import gzip
import io
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

MAX_READ = 8 << 20  # one header's bytes in memory, at most
MAX_LINK = 4096  # a symlink's target (PATH_MAX)
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # an entry first, or an empty archive
GZIP_MAGIC = b"\x1f\x8b"
# Everything the standard library raises on a corrupt, truncated or unsupported archive.
READ_ERRORS = (tarfile.TarError, zipfile.BadZipFile, zipfile.LargeZipFile, gzip.BadGzipFile,
               zlib.error, EOFError, NotImplementedError, RuntimeError, OSError,
               UnicodeError, ValueError)  # fmt: skip


class ArchiveError(Exception):
    """The archive is refused, whole. The message names the entry and why; it is safe to
    show the user (no host path in it)."""

    def __init__(self, reason: str, entry: str | None = None):
        self.entry = entry
        self.reason = reason
        shown = None if entry is None else entry.encode("utf-8", "backslashreplace").decode()
        super().__init__(reason if shown is None else f"{shown[:300]!r}: {reason}")


@dataclass
class Member:
    name: str
    kind: str  # "file", "dir", "symlink" or "hardlink"
    mode: int  # permission bits as the archive gives them (only x is kept)
    link: str | None  # a symlink's target, or the archive name a hardlink repeats
    handle: object  # the format's own record, to open the data with


class Bounded(io.RawIOBase):
    """The decompressed tar stream, refusing an oversized single read or a stream longer
    than ``limit`` bytes."""

    def __init__(self, inner: BinaryIO, limit: int):
        self.inner = inner
        self.limit = limit

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > MAX_READ:
            raise ArchiveError("a header is larger than any real archive has")
        self._check(self.inner.tell() + size)
        return self.inner.read(size)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            self._check(offset)
        return self.inner.seek(offset, whence)

    def tell(self) -> int:
        return self.inner.tell()

    def _check(self, position: int) -> None:
        if position > self.limit:
            raise ArchiveError("unpacks to more than the workspace may hold")


class TarReader:
    def __init__(self, archive: BinaryIO, stream_limit: int):
        self._gzip = gzip.GzipFile(fileobj=archive, mode="rb")
        self._tar = tarfile.TarFile(fileobj=Bounded(self._gzip, stream_limit), mode="r")

    def members(self) -> Iterator[Member]:
        while (info := self._tar.next()) is not None:
            yield Member(info.name, _tar_kind(info), info.mode, info.linkname or None, info)

    def open(self, member: Member) -> BinaryIO:
        data = self._tar.extractfile(member.handle)
        if data is None:
            raise ArchiveError("has no data to read", member.name)
        return data

    def close(self) -> None:
        self._tar.close()
        self._gzip.close()


def _tar_kind(info: tarfile.TarInfo) -> str:
    if info.issparse():
        raise ArchiveError("is a sparse file (not supported)", info.name)
    if info.isreg():
        return "file"
    if info.isdir():
        return "dir"
    if info.issym():
        return "symlink"
    if info.islnk():
        return "hardlink"
    if info.ischr() or info.isblk():
        raise ArchiveError("is a device", info.name)
    if info.isfifo():
        raise ArchiveError("is a FIFO", info.name)
    raise ArchiveError(f"is of an unsupported type ({info.type!r})", info.name)


class ZipReader:
    def __init__(self, archive: BinaryIO, max_entries: int):
        self._zip = zipfile.ZipFile(archive)
        self._infos = self._zip.infolist()
        if len(self._infos) > max_entries:  # from the central directory, before any data
            raise ArchiveError(f"has more than {max_entries:,} entries")

    def members(self) -> Iterator[Member]:
        for info in self._infos:
            if info.flag_bits & 0x1:
                raise ArchiveError("is encrypted", info.filename)
            kind, mode = _zip_kind(info)
            link = self._read_link(info) if kind == "symlink" else None
            yield Member(info.filename, kind, mode, link, info)

    def open(self, member: Member) -> BinaryIO:
        return self._zip.open(member.handle)

    def _read_link(self, info: zipfile.ZipInfo) -> str:
        with self._zip.open(info) as data:  # a zip symlink's target is its content
            target = data.read(MAX_LINK + 1)
        if len(target) > MAX_LINK:
            raise ArchiveError("is a symlink with a target longer than any path", info.filename)
        try:
            return target.decode("utf-8")
        except UnicodeDecodeError:
            raise ArchiveError("is a symlink whose target is not UTF-8", info.filename) from None

    def close(self) -> None:
        self._zip.close()


def _zip_kind(info: zipfile.ZipInfo) -> tuple[str, int]:
    """A zip entry's kind: from the Unix mode in its external attributes when the archive
    was made on Unix (that is where symlinks and devices hide), else from its name."""
    mode = info.external_attr >> 16 if info.create_system == 3 else 0
    kind = stat.S_IFMT(mode)
    named_dir = info.filename.endswith("/")
    if kind == 0:
        return ("dir" if named_dir else "file"), mode
    if named_dir and kind != stat.S_IFDIR:
        raise ArchiveError("is named as a directory but its mode says otherwise", info.filename)
    if stat.S_ISDIR(mode):
        return "dir", mode
    if stat.S_ISREG(mode):
        return "file", mode
    if stat.S_ISLNK(mode):
        return "symlink", mode
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise ArchiveError("is a device", info.filename)
    if stat.S_ISFIFO(mode):
        raise ArchiveError("is a FIFO", info.filename)
    if stat.S_ISSOCK(mode):
        raise ArchiveError("is a socket", info.filename)
    raise ArchiveError("is of an unsupported type", info.filename)


def reader_for(archive: BinaryIO, max_entries: int, stream_limit: int):
    """A reader for the archive by its first bytes; ArchiveError when it is neither."""
    archive.seek(0)
    head = archive.read(4)
    archive.seek(0)
    try:
        if head.startswith(GZIP_MAGIC):
            return TarReader(archive, stream_limit)
        if head in ZIP_MAGIC:
            return ZipReader(archive, max_entries)
    except ArchiveError:
        raise
    except READ_ERRORS as exc:
        raise ArchiveError(f"cannot be read ({_describe(exc)})") from None
    raise ArchiveError("is neither a .zip nor a .tar.gz archive")


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__
