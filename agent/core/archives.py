"""An uploaded archive, checked whole and then unpacked into a directory of its own.

``unpack`` reads the archive twice. The first pass (``plan``) reads every entry's name,
kind and data, writing nothing: any entry that would leave the root (an absolute name,
``..``, a symlink whose target resolves outside, through the archive's other symlinks
too), a device, FIFO or socket, a name that is not plain UTF-8 (NUL, control characters,
backslashes), a ``.git`` component, a name given twice, an entry below a file or a
symlink, a hardlink to anything but an earlier regular file, more than ``max_entries``
entries, more bytes than ``max_bytes`` counted as the decompressor actually produces them
(a zip bomb's declared sizes lie), a ratio of unpacked to archive bytes no source tree has,
or a path too long or too deep refuses the archive whole, naming the entry. Only then does
the second pass (``archive_write``) make the directory and write what the plan holds,
defensively anyway.

One top-level directory common to every entry (``project-main/`` in a GitHub archive) is
stripped. Files keep only their executable bit (0755 or 0644, as git records them),
directories are 0755, and a hardlink is written as a copy of the file it names (the
workspace's file tools refuse files with several links).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from agent.core.archive_formats import MAX_LINK, READ_ERRORS, ArchiveError, Member, reader_for
from agent.core.archive_write import write_plan

__all__ = ["ArchiveError", "Limits", "Plan", "plan", "unpack"]

CHUNK = 1 << 16
MAX_NAME = 255  # bytes in one component (NAME_MAX)
MAX_PATH = 4096  # bytes in a whole path (PATH_MAX)
MAX_DEPTH = 128
MAX_LINKS_FOLLOWED = 40  # as the kernel's own limit
# Components walked resolving every symlink of one archive: 100,000 links each following
# 40 deep ones would otherwise take minutes.
MAX_RESOLVE_STEPS = 2_000_000
HEADER_SLACK = 4096  # tar bytes per entry besides its data (headers, padding)


@dataclass(frozen=True)
class Limits:
    max_bytes: int  # unpacked, all files together (the owner's quota)
    max_entries: int = 100_000
    # Unpacked bytes at most ``max_ratio`` times the archive's, past ``ratio_allowance``:
    # source compresses 3-10 times; a bomb's thousandfold is stopped before the quota.
    max_ratio: int = 200
    ratio_allowance: int = 32 << 20


@dataclass
class Entry:
    path: str  # below the root, "/"-separated, the common top directory stripped
    kind: str  # "file", "dir", "symlink" or "hardlink"
    mode: int  # 0o755 or 0o644 for files and hardlinks
    size: int = 0  # bytes as read in the first pass (a hardlink: its file's)
    target: str | None = None  # a symlink's target; a hardlink's file (an Entry path)
    member: Member | None = None


@dataclass
class Plan:
    entries: list[Entry] = field(default_factory=list)
    total: int = 0  # unpacked bytes, hardlink copies included
    stripped: str | None = None  # the common top directory left out

    def directories(self) -> list[str]:
        """Every directory to make, explicit or implied, parents first."""
        found = {e.path for e in self.entries if e.kind == "dir"}
        for entry in self.entries:
            parts = entry.path.split("/")
            found.update("/".join(parts[:i]) for i in range(1, len(parts)))
        return sorted(found, key=lambda p: (p.count("/"), p))


class Budget:
    """Unpacked bytes counted as they are read, against the limit and the ratio bound."""

    def __init__(self, limits: Limits, archive_size: int):
        self.limits = limits
        self.ratio_bound = archive_size * limits.max_ratio + limits.ratio_allowance
        self.total = 0

    def add(self, count: int, entry: str) -> None:
        self.total += count
        if self.total > self.limits.max_bytes:
            mb = self.limits.max_bytes / (1 << 20)
            raise ArchiveError(f"unpacks to more than the {mb:,.0f} MB the workspace may hold",
                               entry)  # fmt: skip
        if self.total > self.ratio_bound:
            ratio = self.limits.max_ratio
            raise ArchiveError("unpacks to far more than an archive of its size can hold "
                               f"(over {ratio} times; a zip bomb?)", entry)  # fmt: skip


def read_counted(data: BinaryIO, budget: Budget, entry: str) -> Iterator[bytes]:
    """A member's data in chunks, each counted before it is handed on."""
    while chunk := data.read(CHUNK):
        budget.add(len(chunk), entry)
        yield chunk


def components(name: str, entry: str, what: str = "name") -> list[str]:
    """The plain components of an archive name; ArchiveError for anything that could
    leave the root or confuse a reader of the tree."""
    if "\x00" in name:
        raise ArchiveError(f"has a NUL byte in its {what}", entry)
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ArchiveError(f"has a control character in its {what}", entry)
    if "\\" in name:
        raise ArchiveError(f"has a backslash in its {what} (a Windows separator?)", entry)
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise ArchiveError(f"its {what} is not valid UTF-8", entry) from None
    if name.startswith("/"):
        raise ArchiveError(f"is an absolute path (its {what} leaves the root)", entry)
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if size > MAX_PATH or len(parts) > MAX_DEPTH:
        raise ArchiveError(f"its {what} is too long or too deep", entry)
    if any(len(p.encode()) > MAX_NAME for p in parts):
        raise ArchiveError(f"has a component longer than {MAX_NAME} bytes in its {what}", entry)
    return parts


def _entry_parts(name: str) -> list[str]:
    parts = components(name, name)
    if ".." in parts:
        raise ArchiveError("leaves the root ('..')", name)
    # As git itself refuses them (core.protectNTFS): ".GIT", ".git. " and "git~1".
    if any(p.lower().rstrip(". ") == ".git" or p.lower() == "git~1" for p in parts):
        raise ArchiveError("is inside a .git directory: upload the files without the "
                           "repository's own data, or give its URL", name)  # fmt: skip
    return parts


def _file_mode(mode: int) -> int:
    return 0o755 if mode & 0o111 else 0o644


def _read_members(reader, limits: Limits, budget: Budget) -> list[tuple[list[str], Member, int]]:
    """Every member with its components and its data's size, read through the budget."""
    found = []
    for member in reader.members():
        if len(found) >= limits.max_entries:
            raise ArchiveError(f"has more than {limits.max_entries:,} entries")
        parts = _entry_parts(member.name)
        size = 0
        if member.kind == "file":
            with reader.open(member) as data:
                for chunk in read_counted(data, budget, member.name):
                    size += len(chunk)
        elif member.kind in ("symlink", "hardlink") and not member.link:
            raise ArchiveError(f"is a {member.kind} without a target", member.name)
        found.append((parts, member, size))
    return found


def _common_top(found: list[tuple[list[str], Member, int]]) -> str | None:
    """The one top directory every entry is in, when there is one and something below it."""
    tops = {parts[0] for parts, _, _ in found if parts}
    if len(tops) != 1 or any(not parts for parts, _, _ in found):
        return None
    top = tops.pop()
    if any(len(parts) == 1 and m.kind != "dir" for parts, m, _ in found):
        return None
    return top if any(len(parts) > 1 for parts, _, _ in found) else None


def _build(found, top: str | None, budget: Budget) -> Plan:
    plan = Plan(stripped=top)
    by_path: dict[str, Entry] = {}
    for parts, member, size in found:
        parts = parts[1:] if top is not None else parts
        if not parts:
            if member.kind != "dir":
                raise ArchiveError("names the root itself", member.name)
            continue
        path = "/".join(parts)
        before = by_path.get(path)
        if before is not None:
            if before.kind == member.kind == "dir":
                continue
            raise ArchiveError("appears twice in the archive", member.name)
        entry = Entry(path, member.kind, _file_mode(member.mode), size, member.link, member)
        if member.kind == "hardlink":
            entry.target = _hardlink_target(member, top, by_path)
            entry.size = by_path[entry.target].size
            budget.add(entry.size, member.name)  # written again as a copy
        elif member.kind == "dir":
            entry.mode = 0o755
        by_path[path] = entry
        plan.entries.append(entry)
    _check_ancestors(plan, by_path)
    steps = [MAX_RESOLVE_STEPS]
    for entry in plan.entries:
        if entry.kind == "symlink":
            _check_symlink(entry, by_path, steps)
    plan.total = budget.total
    return plan


def _hardlink_target(member: Member, top: str | None, by_path: dict[str, Entry]) -> str:
    parts = components(member.link, member.name, "hardlink's target")
    if top is not None and parts[:1] == [top]:
        parts = parts[1:]
    target = by_path.get("/".join(parts)) if ".." not in parts else None
    if target is None or target.kind not in ("file", "hardlink"):
        raise ArchiveError("is a hardlink to something other than an earlier regular file",
                           member.name)  # fmt: skip
    return target.target if target.kind == "hardlink" else target.path


def _check_ancestors(plan: Plan, by_path: dict[str, Entry]) -> None:
    """No entry below a file or a symlink: a name through a link is a write outside."""
    for entry in plan.entries:
        parts = entry.path.split("/")
        for i in range(1, len(parts)):
            above = by_path.get("/".join(parts[:i]))
            if above is not None and above.kind != "dir":
                raise ArchiveError(f"is below {above.path!r}, which is a {above.kind}",
                                   entry.member.name)  # fmt: skip


def _check_symlink(entry: Entry, by_path: dict[str, Entry], steps: list[int]) -> None:
    """The target resolved as the kernel would in the unpacked tree, following the
    archive's own symlinks: ``a -> .`` then ``b -> a/..`` leaves the root though each
    reads as staying inside. A name the tree lacks is taken as a directory to come."""
    name = entry.member.name
    if len(entry.target.encode("utf-8", "surrogateescape")) > MAX_LINK:
        raise ArchiveError("is a symlink with a target longer than any path", name)
    todo = components(entry.target, name, "symlink's target")
    stack = entry.path.split("/")[:-1]
    followed = 0
    while todo:
        steps[0] -= 1
        if steps[0] < 0:
            raise ArchiveError("has more symlinks through symlinks than can be checked", name)
        part = todo.pop(0)
        if part == "..":
            if not stack:
                raise ArchiveError("is a symlink pointing out of the archive's root", name)
            stack.pop()
            continue
        found = by_path.get("/".join([*stack, part]))
        if found is not None and found.kind == "symlink":
            followed += 1
            if followed > MAX_LINKS_FOLLOWED:
                raise ArchiveError("is a symlink in a loop of symlinks", name)
            todo = components(found.target, found.member.name, "symlink's target") + todo
            continue
        stack.append(part)


def _open(archive: BinaryIO, limits: Limits):
    stream_limit = limits.max_bytes + HEADER_SLACK * (limits.max_entries + 1)
    return reader_for(archive, limits.max_entries, stream_limit)


def plan(archive: BinaryIO, limits: Limits) -> Plan:
    """Check the whole archive without writing anything; ArchiveError on any refusal.
    ``archive`` must be seekable (a zip's directory is at its end)."""
    archive.seek(0, os.SEEK_END)
    budget = Budget(limits, archive.tell())
    reader = _open(archive, limits)
    try:
        found = _read_members(reader, limits, budget)
    except READ_ERRORS as exc:
        raise ArchiveError(f"cannot be read ({type(exc).__name__}: {exc})"[:300]) from None
    finally:
        with contextlib.suppress(*READ_ERRORS, ArchiveError):
            reader.close()
    return _build(found, _common_top(found), budget)


def unpack(archive: BinaryIO, parent_fd: int, name: str, limits: Limits) -> Plan:
    """Check the archive, then unpack it into ``name``, a new directory made in the
    directory ``parent_fd``. On any refusal or failure nothing is left behind."""
    checked = plan(archive, limits)
    reader = _open(archive, limits)
    try:
        write_plan(checked, reader, parent_fd, name)
    finally:
        with contextlib.suppress(*READ_ERRORS, ArchiveError):
            reader.close()
    return checked
