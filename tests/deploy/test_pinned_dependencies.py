"""Pinned dependencies: the lock files cover pyproject.toml with hashes, and the channel
layers are the frameworks' own (any channels-redis of the declared range will do)."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib

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


def test_the_channel_layers_are_the_frameworks_own_classes_configured():
    """No subclass reads a layer's internals, so any channels-redis of the declared range
    starts: the Redis settings name channels-redis's own layer, and start-up passes."""
    env = _settings_env(DJANGO_DEBUG="1", REDIS_URL="redis://127.0.0.1:1/0")
    code = "from django.conf import settings; print(settings.CHANNEL_LAYERS['default']['BACKEND'])"
    proc = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    backend = proc.stdout.strip().splitlines()[-1]
    assert backend == "channels_redis.pubsub.RedisPubSubChannelLayer", proc.stderr
    proc = subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (pin,) = [r for r in project["dependencies"] if r.startswith("channels-redis")]
    assert pin == "channels-redis>=4.3,<5"
