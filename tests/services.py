"""Real PostgreSQL and Redis for the scale-out tests (skipped, or failed on CI, without)."""

from __future__ import annotations

import os
import socket
import uuid
from contextlib import contextmanager
from urllib.parse import urlparse

from tests.conftest import require_service

PG_URL = os.environ.get("HARNESS_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("HARNESS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def pg_admin():
    import psycopg

    try:
        return psycopg.connect(PG_URL.replace("postgres://", "postgresql://", 1),
                               autocommit=True, connect_timeout=3)  # fmt: skip
    except psycopg.OperationalError as exc:
        require_service("PostgreSQL", f"{PG_URL}: {exc}")


@contextmanager
def fresh_pg_database():
    """A new, empty PostgreSQL database; dropped afterwards."""
    admin = pg_admin()
    name = f"harness_test_{uuid.uuid4().hex[:10]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG_URL.rsplit('/', 1)[0]}/{name}"
    finally:
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
    with fresh_pg_database() as database_url:
        env = {"DATABASE_URL": database_url, "REDIS_URL": redis_url,
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
