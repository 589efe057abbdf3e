"""The SQLite database (every session key, every transcript) is private to the server."""

from __future__ import annotations

import os
import stat

from testkit.live import LiveServer


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_database_created_by_manage_py_is_readable_by_its_owner_only(tmp_path):
    old = os.umask(0o022)  # the usual umask: files others may read
    try:
        server = LiveServer(tmp_path)
        server.manage("migrate", "-v", "0")
    finally:
        os.umask(old)
    database = tmp_path / "db.sqlite3"
    assert mode(database) == 0o600
    for suffix in ("-wal", "-shm"):
        sidecar = tmp_path / f"db.sqlite3{suffix}"
        if sidecar.exists():
            assert mode(sidecar) == 0o600, sidecar


def test_an_existing_world_readable_database_is_narrowed_at_start_up(tmp_path):
    server = LiveServer(tmp_path)
    server.manage("migrate", "-v", "0")
    for name in ("db.sqlite3", "db.sqlite3-wal", "db.sqlite3-shm"):
        if (tmp_path / name).exists():
            os.chmod(tmp_path / name, 0o644)  # as an older version left it
    server.manage("check")
    assert mode(tmp_path / "db.sqlite3") == 0o600
    for name in ("db.sqlite3-wal", "db.sqlite3-shm"):
        if (tmp_path / name).exists():
            assert mode(tmp_path / name) == 0o600, name


def test_the_projects_var_directory_is_private(tmp_path, settings):
    from agent.server.dbfile import secure

    settings.VAR_DIR = tmp_path / "var"
    secure(tmp_path / "var" / "db.sqlite3")  # var/ missing: made 0700, the file 0600
    assert mode(tmp_path / "var") == 0o700 and mode(tmp_path / "var" / "db.sqlite3") == 0o600
    os.chmod(tmp_path / "var", 0o755)  # made by an older `make run`
    secure(tmp_path / "var" / "db.sqlite3")
    assert mode(tmp_path / "var") == 0o700


def test_a_state_dir_given_to_the_service_group_keeps_that_groups_access(tmp_path, settings):
    """A management command run as root after a root server dropped to its service user
    (which was given var/: agent/sandbox/drop.py) must not take var/ away from it."""
    import pwd

    import pytest

    from agent.server.dbfile import secure

    try:
        gid = pwd.getpwnam(settings.HARNESS_SERVICE_USER).pw_gid
    except KeyError:
        pytest.skip(f"no {settings.HARNESS_SERVICE_USER} account on this host")
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another group needs root")
    settings.VAR_DIR = tmp_path / "var"
    (tmp_path / "var").mkdir()
    os.chown(tmp_path / "var", 0, gid)
    os.chmod(tmp_path / "var", 0o1777)
    secure(tmp_path / "var" / "db.sqlite3")
    assert mode(tmp_path / "var") == 0o1770  # others out; the group and the sticky bit kept
