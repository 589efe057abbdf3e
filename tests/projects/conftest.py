"""Fixtures of the projects' network tests: a git remote with Basic auth on loopback, a
user whose workspace lives under this test's directory, the relay allowed to reach it."""

from __future__ import annotations

import os

import pytest

from testkit.git_server import GitServer
from tests.conftest import require_bwrap

TOKEN = "tok-3f9a0c1e7d5b42a8-secret"


@pytest.fixture
def remote():
    with GitServer(user="ada-git", token=TOKEN) as server:
        server.make_repository("demo.git", {"README.md": "hello\n", "src/app.py": "print(1)\n"})
        yield server


@pytest.fixture
def net(settings, tmp_path, remote):
    """Settings for the relay: workspaces here (open to the sandbox's uid), the remote
    allowed by an exact rule, small bounds."""
    from agent.core.egress_rules import parse_rules

    require_bwrap()
    root = tmp_path / "workspaces"
    root.mkdir()
    os.chmod(tmp_path, 0o755)
    settings.HARNESS_WORKSPACES = root
    settings.HARNESS_EGRESS_ALLOW = parse_rules(remote.host)
    settings.HARNESS_GIT_TIMEOUT = 60
    return settings


@pytest.fixture(autouse=True)
def _clones_ended():
    """A clone's thread outliving its test would write into the next test's database."""
    yield
    from agent.runs import git_remote

    assert git_remote.wait_for_clones(60), "a clone was still running after its test"
