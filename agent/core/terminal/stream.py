"""What a tmux pane shows, as a bounded stream of files that pages read live.

tmux's ``pipe-pane -O`` hands a pane's output to ``python -m agent.core.terminal.stream
DIR CAP`` (run by tmux's server, as the service user: it copies bytes, it never interprets
them). The bytes go into numbered files in DIR, ``00000000.out``, ``00000001.out``…: once
a file holds ``CAP`` bytes the next one starts and the one before the last is removed, so
a pane never keeps more than about three files on disk, however much it prints.

A pane's directory holds one instance per tmux session started (``current`` names it): a
new session's output starts a new instance and the old ones go. A reader (``Reader``)
follows the files from where it opened them; when the writer has moved on by more than it
keeps, the reader says it lost the thread and its caller draws the screen afresh
(agent/core/terminal/screen.py).

Standard library only: tmux's server runs it as a program.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shlex
import shutil
import sys
from pathlib import Path

CAP = 512 * 1024  # bytes per file; a pane keeps at most three
CHUNK = 65536
CURRENT = "current"
_FILE = re.compile(r"^(\d{8})\.out$")
_INSTANCE = re.compile(r"^[0-9a-f]{16}$")


def file_name(generation: int) -> str:
    return f"{generation:08d}.out"


# -- the writer (tmux's pipe-pane) -------------------------------------------------------


def write(source: int, directory: str, cap: int = CAP) -> None:
    generation, size = 0, 0
    out = open(os.path.join(directory, file_name(0)), "xb", buffering=0)  # noqa: SIM115
    try:
        while chunk := os.read(source, CHUNK):
            if size and size + len(chunk) > cap:
                out.close()
                generation, size = generation + 1, 0
                out = open(os.path.join(directory, file_name(generation)), "xb", buffering=0)  # noqa: SIM115
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(directory, file_name(generation - 2)))
            out.write(chunk)
            size += len(chunk)
    finally:
        out.close()


def pipe_command(python: str, app_dir: str, instance: str, cap: int = CAP) -> str:
    """The shell command tmux's ``pipe-pane`` runs for ``instance``."""
    return (f"cd {shlex.quote(app_dir)} && exec {shlex.quote(python)} -m "
            f"agent.core.terminal.stream {shlex.quote(instance)} {int(cap)}")  # fmt: skip


def new_instance(directory: str) -> str:
    """A fresh instance directory for a session about to start, named in ``current``;
    the pane's earlier instances are removed (a reader holding one of their files keeps
    reading it until it sees the change)."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    name = secrets.token_hex(8)
    os.mkdir(os.path.join(directory, name), 0o700)
    temporary = os.path.join(directory, f".{name}")
    with open(temporary, "w") as f:
        f.write(name)
    os.replace(temporary, os.path.join(directory, CURRENT))
    for entry in os.listdir(directory):
        if _INSTANCE.match(entry) and entry != name:
            shutil.rmtree(os.path.join(directory, entry), ignore_errors=True)
    return os.path.join(directory, name)


def current(directory: str) -> str | None:
    """The instance now written to, or None (no session started yet)."""
    try:
        name = Path(directory, CURRENT).read_text().strip()
    except OSError:
        return None
    return name if _INSTANCE.match(name) else None


def remove(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)


# -- the reader -------------------------------------------------------------------------


def generations(instance: str) -> list[int]:
    try:
        names = os.listdir(instance)
    except OSError:
        return []
    return sorted(int(m.group(1)) for m in map(_FILE.match, names) if m)


class Lost(Exception):
    """The writer moved on past what it keeps: the reader must draw the screen afresh."""


class Reader:
    """One reader of one instance, from its start or from its end (``at_end``)."""

    def __init__(self, instance: str, at_end: bool) -> None:
        self.instance = instance
        self.generation: int | None = None
        self.fd: int | None = None
        # The newest file may go between the listing and the open (the writer moved on
        # twice meanwhile): list again, or this reader would start from a file long gone.
        while at_end and (found := generations(instance)):
            if self._open(found[-1]):
                os.lseek(self.fd, 0, os.SEEK_END)
                break

    def _open(self, generation: int) -> bool:
        try:
            fd = os.open(os.path.join(self.instance, file_name(generation)),
                         os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)  # fmt: skip
        except FileNotFoundError:
            return False
        self.close()
        self.fd, self.generation = fd, generation
        return True

    def read(self, limit: int = CHUNK) -> bytes:
        """What was written since the last read (at most ``limit`` bytes); ``Lost`` when
        the writer's files moved past this reader's."""
        if self.fd is None and not self._open(0):
            found = generations(self.instance)
            if found and found[0] > 0:
                raise Lost  # the first file is gone already
            if not found or not self._open(0):  # (made since the first try)
                return b""
        data = os.read(self.fd, limit)
        if data:
            return data
        following = self.generation + 1
        if not os.path.exists(os.path.join(self.instance, file_name(following))):
            if any(g > following for g in generations(self.instance)):
                raise Lost
            return b""
        data = os.read(self.fd, limit)  # what came before the writer moved on
        if data:
            return data
        if not self._open(following):
            raise Lost
        return self.read(limit)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def main(argv: list[str]) -> int:
    directory, cap = argv
    write(0, directory, max(CHUNK, int(cap)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
