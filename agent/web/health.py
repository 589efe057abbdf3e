"""``/healthz``: the database, the channel layer, the disks the server writes to and the bash
sandbox, with the version and uptime; and the middleware that answers it for a local probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import os
import tempfile
from pathlib import Path

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_safe

from agent.core.cli_agents.tmux import tmux_version
from agent.runs.cli_sessions import agents
from agent.runs.selftest import sandbox_status
from agent.server import storage
from agent.web import prometheus

PATH = "/healthz"
VERSION = importlib.metadata.version("harness")


class HealthProbeMiddleware:
    """Answers ``GET /healthz`` (and ``/metrics``, which needs its token) before the host
    check and the HTTPS redirect.

    A load balancer, systemd or a container runtime probes the port directly: plain HTTP,
    ``Host: 127.0.0.1``. Production settings answer that with a 301 to https or a 400
    (DisallowedHost), so the probe would see the server down. The answer does not depend on
    the host or the scheme and sets no cookie, so this one path, for GET and HEAD only,
    skips both; every other path and method goes through the middleware as before.
    Must come first in MIDDLEWARE (before SecurityMiddleware and CommonMiddleware)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method in ("GET", "HEAD"):
            if request.path_info == PATH:
                return healthz(request)
            if request.path_info == "/metrics":
                return prometheus.metrics(request)
        return self.get_response(request)


def _uptime_seconds() -> float:
    """Seconds since this process started (the kernel's count, not an import time)."""
    with open("/proc/self/stat") as f:
        # Field 22, after the command name (which may hold spaces, hence the last ")").
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        since_boot = float(f.read().split()[0])
    return round(since_boot - start_ticks / os.sysconf("SC_CLK_TCK"), 1)


async def _channel_layer_roundtrip() -> None:
    layer = get_channel_layer()
    async with asyncio.timeout(3):
        channel = await layer.new_channel()  # with Redis: a SUBSCRIBE, a round trip
        try:
            await layer.send(channel, {"type": "health.ping"})
            assert (await layer.receive(channel))["type"] == "health.ping"
        finally:
            # A pub/sub channel stays subscribed until a receive on it is cancelled
            # (channels-redis's own clean-up of a channel; the in-memory layer's is alike).
            waiting = asyncio.ensure_future(layer.receive(channel))
            await asyncio.sleep(0)
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting


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


async def _cli_agents() -> dict:
    tmux = await tmux_version()
    return {"tmux": tmux or "not installed",
            "agents": {a["name"]: a["version"] or f"unavailable: {a.get('reason')}"
                       for a in await agents()}}  # fmt: skip


@require_safe
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
    checks["sandbox"] = sandbox_status()  # the start-up self-test's result (runs/selftest.py)
    healthy = not any(v.startswith("error") for v in checks.values())
    body = {"status": "ok" if healthy else "error", **checks}
    # Informational: a missing tmux or CLI disables CLI agents, not the server.
    body["cli_agents"] = async_to_sync(_cli_agents)()
    body.update(version=VERSION, uptime_seconds=_uptime_seconds())
    return JsonResponse(body, status=200 if healthy else 503)
