"""``/healthz``: the database, the channel layer and the disks the server writes to."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from agent.server import storage


async def _channel_layer_roundtrip() -> None:
    layer = get_channel_layer()
    async with asyncio.timeout(3):
        channel = await layer.new_channel()  # with Redis: a SUBSCRIBE, a round trip
        try:
            await layer.send(channel, {"type": "health.ping"})
            assert (await layer.receive(channel))["type"] == "health.ping"
        finally:
            if hasattr(layer, "release"):  # a pub/sub channel stays subscribed otherwise
                await layer.release(channel)


def _write_probe(directory: Path) -> None:
    """Create, write, fsync and delete a small file: what the server's own writes need."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".healthz-", dir=directory)
    try:
        os.write(fd, b"\0" * 4096)
        os.fsync(fd)
    finally:
        os.close(fd)
        os.unlink(name)


def _free_space(path: Path) -> str:
    st = os.statvfs(storage.existing(path))
    free_mb = st.f_bavail * st.f_frsize // (1024 * 1024)
    if free_mb < settings.HARNESS_MIN_FREE_MB or (st.f_files and not st.f_favail):
        return f"error: disk full ({free_mb} MB free, minimum {settings.HARNESS_MIN_FREE_MB} MB)"
    return "ok"


def _disk_checks() -> dict[str, str]:
    """The disks the server writes to: var/ must take a write, and var/'s, the SQLite
    database's and the workspaces' file systems must have HARNESS_MIN_FREE_MB free (a
    full one fails every user's requests, or every run)."""
    checks = {}
    try:
        _write_probe(Path(settings.VAR_DIR))
        checks["state_dir"] = _free_space(Path(settings.VAR_DIR))
    except OSError as exc:
        checks["state_dir"] = f"error: cannot write: {os.strerror(exc.errno or 0)}"
    targets = {"workspaces_disk": Path(settings.HARNESS_WORKSPACES)}
    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        targets["database_disk"] = Path(str(database["NAME"])).parent
    for name, path in targets.items():
        try:
            checks[name] = _free_space(path)
        except OSError as exc:
            checks[name] = f"error: {os.strerror(exc.errno or 0)}"
    return checks


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    checks = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # the point is to report any failure
        checks["database"] = f"error: {type(exc).__name__}"
    try:
        async_to_sync(_channel_layer_roundtrip)()
        checks["channel_layer"] = "ok"
    except Exception as exc:
        checks["channel_layer"] = f"error: {type(exc).__name__}"
    checks.update(_disk_checks())
    healthy = all(v == "ok" for v in checks.values())
    status = 200 if healthy else 503
    return JsonResponse({"status": "ok" if healthy else "error", **checks}, status=status)
