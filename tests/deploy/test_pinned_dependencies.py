"""Pinned dependencies: the lock files cover pyproject.toml with hashes, and a channels-redis
whose internals moved stops start-up naming its version (agent/server/layers.py reads them)."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib

import channels_redis

from tests.conftest import REPO
from tests.deploy.test_config import _settings_env

PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^ ;\\]+)", re.MULTILINE)


def _pins(name: str) -> dict[str, str]:
    text = (REPO / name).read_text()
    return {m[1].lower().replace("_", "-"): m[2] for m in PIN.finditer(text)}


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~ ;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_lock_files_pin_every_dependency_with_hashes_at_the_installed_versions():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime, dev = _pins("requirements.lock"), _pins("requirements-dev.lock")
    assert _requirement_names(project["dependencies"]) <= set(runtime)
    assert _requirement_names(project["optional-dependencies"]["dev"]) <= set(dev)
    assert {k: v for k, v in dev.items() if k in runtime} == runtime  # one set of versions
    for name in ("requirements.lock", "requirements-dev.lock"):
        blocks = re.split(r"\n(?=[A-Za-z0-9])", (REPO / name).read_text())
        assert all("--hash=sha256:" in b for b in blocks if PIN.match(b)), name
    # What this environment runs (make test installs it from the lock) is what is locked.
    for package, version in dev.items():
        assert importlib.metadata.version(package) == version, package


def test_a_channels_redis_without_the_internals_the_layer_reads_stops_start_up(tmp_path):
    # A copy of the installed channels-redis, as a later release might be: one private
    # name the local-first layer reads is gone.
    package = tmp_path / "channels_redis"
    shutil.copytree(channels_redis.__path__[0], package)
    pubsub = package / "pubsub.py"
    pubsub.write_text(pubsub.read_text().replace("_subscribed_to", "_subscriptions"))
    dist = tmp_path / "channels_redis-4.4.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: channels-redis\nVersion: 4.4.0\n")
    env = _settings_env(DJANGO_DEBUG="1", REDIS_URL="redis://127.0.0.1:1/0",
                        PYTHONPATH=str(tmp_path))  # fmt: skip
    proc = subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode != 0
    assert "channels-redis 4.4.0 is not the version" in proc.stderr
    assert "RedisSingleShardConnection instance._subscribed_to" in proc.stderr
    # The installed one passes the same start-up.
    del env["PYTHONPATH"]
    proc = subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
