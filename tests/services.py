"""Real PostgreSQL and Redis for the scale-out tests (skipped, or failed on CI, without)."""

from __future__ import annotations

import atexit
import os
import socket
import tempfile
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

from tests.conftest import require_service

PG_URL = os.environ.get("HARNESS_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")


def worker_redis_url(url: str) -> str:
    """Under pytest-xdist, worker gwN uses the Redis database N above the given one: a
    test's flush, or a cluster's channel groups (user.1 of a fresh database), must not reach
    the servers of a test on the other worker (the layer's names carry the database number:
    Redis's pub/sub alone ignores it). The modules with a fixed database of their own (11,
    12; 13 and 14 in tests/deploy/test_services.py) each run on one worker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return url
    parsed = urlparse(url)
    database = int(parsed.path.strip("/") or 0) + int(worker[2:])
    return parsed._replace(path=f"/{database}").geturl()


REDIS_URL = worker_redis_url(os.environ.get("HARNESS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))


def pg_admin():
    import psycopg

    try:
        return psycopg.connect(PG_URL.replace("postgres://", "postgresql://", 1),
                               autocommit=True, connect_timeout=3)  # fmt: skip
    except psycopg.OperationalError as exc:
        require_service("PostgreSQL", f"{PG_URL}: {exc}")


def database_url(name: str) -> str:
    return f"{PG_URL.rsplit('/', 1)[0]}/{name}"


_template_lock = threading.Lock()
_template: list[str] = []


def migrated_template() -> str:
    """The name of a migrated database, made once per process (dropped at its exit), that
    new databases are copies of (CREATE DATABASE … TEMPLATE): no `migrate` per server."""
    from testkit.live import LiveServer

    with _template_lock:
        if not _template:
            name = f"harness_template_{uuid.uuid4().hex[:10]}"
            admin = pg_admin()
            admin.execute(f'CREATE DATABASE "{name}"')
            atexit.register(drop_database, name)
            with tempfile.TemporaryDirectory(prefix="harness-pg-template-") as root:
                LiveServer(Path(root), DATABASE_URL=database_url(name)).manage("migrate", "-v", "0")
            admin.close()
            _template.append(name)
        return _template[0]


def drop_database(name: str) -> None:
    with pg_admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def fresh_pg_database(migrated: bool = False):
    """A new PostgreSQL database, empty or (``migrated``) a copy of the migrated template;
    dropped afterwards."""
    from testkit.live import MIGRATED

    template = f' TEMPLATE "{migrated_template()}"' if migrated else ""
    admin = pg_admin()
    name = f"harness_test_{uuid.uuid4().hex[:10]}"
    admin.execute(f'CREATE DATABASE "{name}"{template}')
    url = database_url(name)
    if migrated:
        MIGRATED.add(url)
    try:
        yield url
    finally:
        MIGRATED.discard(url)
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def require_redis() -> str:
    parsed = urlparse(REDIS_URL)
    try:
        with socket.create_connection((parsed.hostname, parsed.port or 6379), timeout=3) as s:
            s.sendall(b"PING\r\n")
            if not s.recv(16).startswith(b"+PONG"):
                raise OSError("no PONG")
    except OSError as exc:
        require_service("Redis", f"{REDIS_URL}: {exc}")
    return REDIS_URL


@contextmanager
def two_servers(root, model_url: str, *users: str):
    """Two live servers sharing a fresh PostgreSQL database and Redis."""
    from testkit.live import LiveServer

    redis_url = require_redis()
    with fresh_pg_database(migrated=True) as url:
        env = {"DATABASE_URL": url, "REDIS_URL": redis_url,
               "ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": model_url,
               "HARNESS_BASH": "off", "HARNESS_RUN_LEASE": "3", "HARNESS_SSE_HEARTBEAT": "1",
               "HARNESS_RUNS_PER_MINUTE": "100"}  # fmt: skip
        servers = [LiveServer(root / name, **env) for name in ("a", "b")]
        for server in servers:
            server.root.mkdir()
            server.env["HARNESS_WORKSPACES"] = str(root / "workspaces")
        try:
            for server in servers:
                server.start()
            servers[0].create_users(*users)
            yield servers
        finally:
            for server in servers:
                server.stop()
