"""Back up the SQLite database while the server runs, with SQLite's online backup API.

A file copy of a database in WAL mode is not a backup: the newest transactions live in the
``-wal`` file until a checkpoint, and a copy taken during a write can be torn. The backup
API copies a consistent snapshot, the WAL's contents included, page by page without
blocking the server's writers for long. PostgreSQL deployments use ``pg_dump`` instead.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

PAGES_PER_STEP = 1024  # then the lock is released, so writers get in between steps


class Command(BaseCommand):
    help = "Copy the SQLite database to DEST (mode 0600) with the online backup API."

    def add_arguments(self, parser):
        parser.add_argument("destination", type=Path)

    def handle(self, *args, destination: Path, **opts):
        database = settings.DATABASES["default"]
        if database["ENGINE"] != "django.db.backends.sqlite3":
            raise CommandError(
                "the database is not SQLite: back it up with its own tools "
                "(PostgreSQL: pg_dump -Fc, see docs/DEPLOY.md)"
            )
        source_path = Path(str(database["NAME"]))
        if not source_path.exists():
            raise CommandError(f"no database at {source_path}")
        if destination.is_dir():
            destination = destination / source_path.name
        # Written beside the destination and renamed over it only once whole and checked,
        # so a failed backup never replaces a good one; 0600: it holds session keys.
        partial = destination.with_name(f".{destination.name}.partial")
        partial.unlink(missing_ok=True)
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        try:
            source = sqlite3.connect(f"file:{source_path}?mode=ro", uri=True, timeout=20)
            target = sqlite3.connect(partial)
            try:
                source.backup(target, pages=PAGES_PER_STEP)
                target.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
                (verdict,) = target.execute("PRAGMA integrity_check").fetchone()
            finally:
                target.close()
                source.close()
            if verdict != "ok":
                raise CommandError(f"the copy failed its integrity check: {verdict}")
            os.replace(partial, destination)
        finally:
            partial.unlink(missing_ok=True)
        size_mb = destination.stat().st_size / 1e6
        self.stdout.write(f"backed up {source_path} to {destination} ({size_mb:.1f} MB)")
