"""The SQLite database file is private to the server: mode 0600, in a 0700 ``var/``.

It holds every session key (a signed-in browser) and every transcript, and SQLite creates
it, and its -wal and -shm files, with the process's umask (usually world-readable). So at
start-up (``AgentConfig.ready``, before anything connects: Django connects lazily) the file
is created 0600 if it is missing, which its -wal/-shm files then copy, and an existing one
is narrowed to 0600; each new connection narrows its files again, in case one was made by
something else (a test database, ``sqlite3`` by hand).
"""

from __future__ import annotations

import logging
import os
import pwd
import stat
from pathlib import Path

from django.conf import settings
from django.db.backends.signals import connection_created
from django.dispatch import receiver

log = logging.getLogger(__name__)

FILE_MODE = 0o600
DIR_MODE = 0o700
SUFFIXES = ("", "-wal", "-shm", "-journal")


def sqlite_path(database: dict) -> Path | None:
    """The file of a SQLite database setting, or None (another engine, or in memory)."""
    if database.get("ENGINE") != "django.db.backends.sqlite3":
        return None
    name = str(database.get("NAME") or "")
    if not name or name == ":memory:" or name.startswith("file:"):
        return None
    return Path(name)


def _narrow(path: Path, mode: int) -> None:
    try:
        if path.exists() and (path.stat().st_mode & 0o777) != mode:
            os.chmod(path, mode)
    except OSError as exc:  # not ours (another account's file): say so, do not stop
        log.warning("could not make %s mode %o: %s", path, mode, exc)


def _service_gid() -> int | None:
    try:
        return pwd.getpwnam(settings.HARNESS_SERVICE_USER).pw_gid or None
    except (KeyError, AttributeError):
        return None


def _narrow_state_dir(directory: Path) -> None:
    """var/ closed to others: 0700, or, once a root server gave it to its service group
    (agent/sandbox/drop.py), that group's access and the sticky bit kept. A management
    command run as root must not take the state away from a server that dropped to it."""
    try:
        st = directory.stat()
    except OSError:
        return
    current = stat.S_IMODE(st.st_mode)
    gid = _service_gid()
    wanted = current & ~0o007 if gid is not None and st.st_gid == gid else DIR_MODE
    if current != wanted:
        try:
            os.chmod(directory, wanted)
        except OSError as exc:  # not ours: say so, do not stop
            log.warning("could not make %s mode %o: %s", directory, wanted, exc)


def secure(path: Path) -> None:
    """Creates ``path`` 0600 if missing (its directory 0700 if it is the project's var/,
    which this creates too) and narrows existing files to 0600."""
    directory = path.parent
    if directory.resolve() == Path(settings.VAR_DIR).resolve():
        directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        _narrow_state_dir(directory)
    if directory.is_dir():
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
            os.close(fd)  # an empty file is an empty database to SQLite
        except FileExistsError:
            pass
        except OSError as exc:
            log.warning("could not create %s: %s", path, exc)
    for suffix in SUFFIXES:
        _narrow(path.with_name(path.name + suffix), FILE_MODE)


def secure_at_startup() -> None:
    for database in settings.DATABASES.values():
        path = sqlite_path(database)
        if path is not None:
            secure(path)


@receiver(connection_created, dispatch_uid="harness-private-sqlite")
def _on_connection(sender, connection, **kwargs) -> None:
    if connection.vendor != "sqlite":
        return
    path = sqlite_path(connection.settings_dict)
    if path is not None:
        for suffix in SUFFIXES:
            _narrow(path.with_name(path.name + suffix), FILE_MODE)
