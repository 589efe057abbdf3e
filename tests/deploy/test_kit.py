"""The deploy kit (deploy/), checked by the tools that will read it: systemd-analyze verify,
nginx -t, docker compose config (each skips with the reason when its tool is absent); and
the Daphne unit's own command line started and probed the way the kit says a load
balancer should: plain HTTP to the port, Host 127.0.0.1."""

from __future__ import annotations

import configparser
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from testkit.live import free_port
from tests.conftest import REPO
from tests.deploy.test_config import _settings_env

DEPLOY = REPO / "deploy"
HOST = "harness.example.com"
UNITS = ("harness@.service", "harness-migrate.service", "harness-clearsessions.service",
         "harness-clearsessions.timer")  # fmt: skip
# Each of these breaks bubblewrap, setpriv, the per-user cgroups or the workspace mounts
# shared by the instances (docs/DEPLOY.md, "Hardening").
BREAKS_THE_SANDBOX = ("RestrictNamespaces", "PrivateUsers", "SystemCallFilter",
                      "CapabilityBoundingSet", "ProtectSystem", "ProtectHome", "PrivateTmp",
                      "PrivateDevices", "ProtectKernelModules", "ProtectKernelLogs",
                      "ProtectClock", "ProtectControlGroups", "ReadOnlyPaths",
                      "InaccessiblePaths", "TemporaryFileSystem", "PrivateMounts")  # fmt: skip


def _tool(name: str) -> str:
    path = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if path is None:
        pytest.skip(f"{name} is not installed: the kit's file is not checked by it here")
    return path


def _unit(name: str, directory: Path = DEPLOY / "systemd") -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # keys are case-sensitive
    # systemd repeats keys (LoadCredential=, Environment=): keep the last; tests that need
    # all of them read the text. A line ending in a backslash goes on on the next.
    parser.read_string(re.sub(r"\\\n\s*", " ", (directory / name).read_text()))
    return parser


def _localised(tmp_path: Path) -> Path:
    """The units with this checkout's paths, a credentials directory with real files."""
    etc = tmp_path / "etc"
    (etc / "credentials").mkdir(parents=True)
    for name in ("secret_key", "anthropic_api_key", "database_url"):
        (etc / "credentials" / name).write_text("x\n")
    shutil.copy(DEPLOY / "harness.env.example", etc / "harness.env")
    units = tmp_path / "units"
    units.mkdir()
    for name in UNITS:
        text = (DEPLOY / "systemd" / name).read_text()
        for kit, here in (("/srv/harness/venv", sys.prefix), ("/srv/harness/app", str(REPO)),
                          ("/etc/harness", str(etc))):  # fmt: skip
            text = text.replace(kit, here)
        (units / name).write_text(text)
    return units


def test_systemd_analyze_verify_passes_every_unit_without_a_warning(tmp_path):
    analyze = _tool("systemd-analyze")
    units = _localised(tmp_path)
    # A template is verified through an instance of it: the instance name is the port.
    shutil.copy(units / "harness@.service", units / "harness@8001.service")
    names = ["harness@8001.service", *UNITS[1:]]
    proc = subprocess.run([analyze, "verify", "--man=no", *(f"./{n}" for n in names)],
                          cwd=units, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "" and proc.stdout.strip() == "", proc.stderr


def test_the_daphne_unit_takes_proxy_headers_and_no_hardening_that_breaks_the_sandbox():
    service = _unit("harness@.service")["Service"]
    assert "--proxy-headers" in shlex.split(service["ExecStart"])
    assert "%i" in service["ExecStart"]
    text = (DEPLOY / "systemd" / "harness@.service").read_text()
    set_keys = {line.split("=", 1)[0] for line in text.splitlines() if "=" in line
                and not line.startswith("#")}  # fmt: skip
    assert set_keys.isdisjoint(BREAKS_THE_SANDBOX), set_keys & set(BREAKS_THE_SANDBOX)
    assert service["NoNewPrivileges"] == "yes" and "pids memory" in service["Delegate"]
    assert int(service["LimitNOFILE"]) >= 65536  # a descriptor per socket: not 1024
    timer = _unit("harness-clearsessions.timer")
    assert timer["Timer"]["OnCalendar"] == "daily"
    assert "clearsessions" in _unit("harness-clearsessions.service")["Service"]["ExecStart"]


# Daphne's timeouts in every command line of the kit (docs/DEPLOY.md, "Connections and
# floods"), as its own argument parser reads them (two of its options are spelt with "_").
TIMEOUTS = {"http_timeout": 3600, "websocket_timeout": 86400, "websocket_connect_timeout": 10,
            "application_close_timeout": 10}  # fmt: skip


def _daphne_options(command: list[str]) -> dict:
    from daphne.cli import CommandLineInterface

    start = next(i for i, word in enumerate(command) if word.endswith("daphne")) + 1
    parsed = CommandLineInterface().parser.parse_args(command[start:])
    return {name: getattr(parsed, name) for name in TIMEOUTS}


def test_every_daphne_command_of_the_kit_sets_its_timeouts():
    unit = shlex.split(_unit("harness@.service")["Service"]["ExecStart"].replace("%i", "8001"))
    compose = (DEPLOY / "compose.yaml").read_text()
    shell = re.search(r"- >-\n((?:\s{8}.*\n)+)", compose)[1]
    dockerfile = (DEPLOY / "Dockerfile").read_text().replace("\\\n", "")
    image = json.loads(re.search(r"^CMD (\[.*\])$", dockerfile, re.M)[1])
    for command in (unit, shlex.split(shell.split("&& exec", 1)[1]), image):
        assert _daphne_options(command) == TIMEOUTS, command
    assert re.search(r"ulimits:\n\s+nofile: \{soft: 65536, hard: 65536\}", compose)


class UnitServer:
    """Daphne started from the kit's units as systemd would run them: the migrate unit's
    ExecStart=, then harness@PORT's (%i the port, the secrets as *_FILE credentials), in
    production mode. No REDIS_URL or API key: the in-memory layer and the demo model."""

    def __init__(self, tmp_path: Path, **env: str):
        units = _localised(tmp_path)
        credentials = tmp_path / "etc" / "credentials"
        (credentials / "secret_key").write_text(secrets.token_urlsafe(60) + "\n")
        (credentials / "database_url").write_text(f"sqlite:///{tmp_path / 'db.sqlite3'}\n")
        self.env = _settings_env(
            DJANGO_ALLOWED_HOSTS=HOST, DJANGO_BEHIND_TLS_PROXY="1",
            DJANGO_SECRET_KEY_FILE=str(credentials / "secret_key"),
            DATABASE_URL_FILE=str(credentials / "database_url"),
            HARNESS_WORKSPACES=str(tmp_path / "workspaces"), HARNESS_WORKSPACE_STORAGE="plain",
            HARNESS_BASH="sandbox" if shutil.which("bwrap") else "off", **env,
        )  # fmt: skip
        self.port = free_port()
        self.log = tmp_path / "daphne.log"

        def command(unit: str) -> list[str]:
            line = _unit(unit, units)["Service"]["ExecStart"].replace("%i", str(self.port))
            return shlex.split(line)

        subprocess.run(command("harness-migrate.service"), cwd=REPO, env=self.env, check=True,
                       capture_output=True, timeout=120)  # fmt: skip
        output = self.log.open("wb")
        self.process = subprocess.Popen(command("harness@.service"), cwd=REPO, env=self.env,
                                        stdout=output, stderr=subprocess.STDOUT)  # fmt: skip

    def probe(self) -> dict:
        """GET /healthz the way the kit's load balancer does: plain HTTP to the port."""
        deadline = time.monotonic() + 30
        while True:
            url = f"http://127.0.0.1:{self.port}/healthz"
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    return json.loads(response.read())
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(self.log.read_text()[-3000:]) from None
                time.sleep(0.2)

    def manage(self, *args: str) -> str:
        command = [sys.executable, "manage.py", *args]
        return subprocess.run(command, cwd=REPO, env=self.env, check=True, capture_output=True,
                              text=True, timeout=120).stdout  # fmt: skip

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=20)


@pytest.fixture
def unit_server(tmp_path):
    server = UnitServer(tmp_path)
    yield server
    server.stop()


def test_the_daphne_units_command_line_serves_healthz_to_a_local_probe(unit_server):
    body = unit_server.probe()
    assert body["status"] == "ok" and body["database"] == "ok", body


def _nginx_config(tmp_path: Path, site: str) -> Path:
    """An nginx.conf under a temporary prefix that includes ``site`` with a throwaway
    certificate in place of the real one."""
    openssl = _tool("openssl")
    key, cert = str(tmp_path / "key.pem"), str(tmp_path / "cert.pem")
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", f"/CN={HOST}", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)  # fmt: skip
    live = f"/etc/letsencrypt/live/{HOST}"
    site = site.replace(f"{live}/fullchain.pem", cert).replace(f"{live}/privkey.pem", key)
    (tmp_path / "site.conf").write_text(site)
    (tmp_path / "logs").mkdir(exist_ok=True)
    config = tmp_path / "nginx.conf"
    config.write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/logs/error.log;\nevents {{}}\n"
        f"http {{\n    access_log off;\n    include {tmp_path}/site.conf;\n}}\n"
    )
    return config


def test_nginx_accepts_the_site(tmp_path):
    nginx = _tool("nginx")
    site = (DEPLOY / "nginx" / "harness.conf").read_text()
    config = _nginx_config(tmp_path, site)
    proc = subprocess.run([nginx, "-t", "-p", str(tmp_path), "-c", str(config)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "test is successful" in proc.stderr
    for header in ("X-Forwarded-For $remote_addr", "X-Forwarded-Proto $scheme",
                   "Upgrade $http_upgrade"):  # fmt: skip
        assert f"proxy_set_header {header};" in site


def _seconds(value: str) -> int:
    return int(value[:-1]) * {"s": 1, "m": 60}[value[-1]] if value[-1] in "sm" else int(value)


def test_the_site_bounds_each_address_and_reads_every_body_before_daphne_does(settings):
    """What docs/DEPLOY.md's "Connections and floods" promises of the site (the live
    tests in test_kit_proxy.py show it working)."""
    site = (DEPLOY / "nginx" / "harness.conf").read_text()
    server = site[site.index("listen 443") :]
    zone = re.search(r"limit_conn_zone \$binary_remote_addr zone=(\w+):\d+m;", site)[1]
    limit = re.search(rf"\n    limit_conn {zone} (\d+);", server)  # for the whole server
    assert limit and 32 <= int(limit[1]) <= 1024, limit
    assert re.search(r"\n    limit_req zone=\w+ burst=\d+ nodelay;", server)
    for name, most in (("client_header_timeout", 30), ("client_body_timeout", 30),
                       ("send_timeout", 60)):  # fmt: skip
        found = re.search(rf"\n    {name} (\w+);", server)
        assert found and _seconds(found[1]) <= most, name
    # No body is streamed to Daphne; uploads take HARNESS_MAX_UPLOAD_MB, buffered by nginx.
    assert "proxy_request_buffering off" not in site
    locations = dict(re.findall(r"\n    location ([^{]+?) \{(.*?)\n    \}", site, re.S))
    for path in ("/api/files/", "/files/upload/"):  # harness_site/asgi.py's UPLOAD_PATHS
        body = locations[path]
        assert f"client_max_body_size {settings.HARNESS_MAX_UPLOAD_MB}m;" in body, path
        assert "proxy_request_buffering on;" in body, path
    assert "limit_req zone=harness_signin" in locations["~ ^/(accounts|admin)/login/$"]


def _compose() -> list[str]:
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    ):
        return [docker, "compose"]
    return [_tool("docker-compose")]


def test_docker_compose_accepts_the_compose_file():
    compose = _compose()
    proc = subprocess.run([*compose, "-f", str(DEPLOY / "compose.yaml"), "config", "-q"],
                          cwd=DEPLOY, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = (DEPLOY / "compose.yaml").read_text()
    # What bubblewrap needs in a container, and the probe the kit documents.
    for needed in ("SYS_ADMIN", "seccomp=unconfined", "apparmor=unconfined", "--proxy-headers",
                   "http://127.0.0.1:8000/healthz", "manage.py clearsessions"):  # fmt: skip
        assert needed in text
