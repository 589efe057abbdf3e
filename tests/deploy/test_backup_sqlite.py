"""backup_sqlite: a consistent copy of the live WAL database, where a file copy falls short."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.db import connection

from tests.conftest import REPO
from tests.deploy.test_config import _settings_env


def _usernames(path) -> set[str]:
    """The users the database file at ``path`` holds (none when it lacks even the table)."""
    db = sqlite3.connect(path)
    try:
        return {name for (name,) in db.execute("SELECT username FROM agent_user")}
    except sqlite3.OperationalError:  # no such table: the schema too is still in the WAL
        return set()
    finally:
        db.close()


@pytest.mark.django_db(transaction=True)
def test_the_backup_holds_what_is_still_in_the_wal_and_a_file_copy_does_not(tmp_path):
    from agent.models import User

    for name in ("ada", "grace", "linus"):
        User.objects.create_user(name, password="pw-long-enough-1")
    live = connection.settings_dict["NAME"]
    # The server's connection is open, so the new rows are still in the -wal file.
    assert os.path.getsize(f"{live}-wal") > 0
    shutil.copyfile(live, tmp_path / "copied.sqlite3")
    assert not {"ada", "grace", "linus"} <= _usernames(tmp_path / "copied.sqlite3")

    call_command("backup_sqlite", str(tmp_path))
    backup = tmp_path / os.path.basename(live)
    assert {"ada", "grace", "linus"} <= _usernames(backup)
    assert stat.S_IMODE(os.stat(backup).st_mode) == 0o600
    assert not os.path.exists(f"{backup}-wal")  # one self-contained file
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []


def test_backup_sqlite_refuses_a_database_that_is_not_sqlite(tmp_path):
    env = _settings_env(DJANGO_DEBUG="1", DATABASE_URL="postgres://h@127.0.0.1:1/harness")
    command = [sys.executable, "manage.py", "backup_sqlite", str(tmp_path)]
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "pg_dump" in proc.stderr
