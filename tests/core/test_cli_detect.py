"""Whether a CLI agent is available: ``--version``, remembered a minute, where a slow answer
on a busy host is not taken for a missing CLI."""

from __future__ import annotations

import time

import pytest

from agent.core.cli_agents import detect
from agent.core.cli_agents.detect import detect_cached
from agent.core.cli_agents.providers import PROVIDERS


@pytest.fixture
def fake_pi(tmp_path, monkeypatch):
    """A ``pi`` that prints its version, or hangs while ``slow`` exists."""
    slow = tmp_path / "slow"
    executable = tmp_path / "pi"
    executable.write_text(f"#!/bin/sh\n[ -e {slow} ] && sleep 30\necho 0.73.1\n")
    executable.chmod(0o755)
    monkeypatch.setattr(detect, "VERSION_TIMEOUT", 0.5)
    detect._cache.clear()
    yield {"HARNESS_AGENT_PI_COMMAND": str(executable)}, slow
    detect._cache.clear()


async def test_a_version_that_does_not_answer_in_time_keeps_what_was_seen(fake_pi, monkeypatch):
    environ, slow = fake_pi
    first = await detect_cached(PROVIDERS["pi"], environ)
    assert first.available and first.version == "0.73.1"
    slow.touch()
    monkeypatch.setattr(detect, "CACHE_SECONDS", 0.0)  # every request asks again
    started = time.monotonic()
    again = await detect_cached(PROVIDERS["pi"], environ)
    assert time.monotonic() - started < 20  # the hanging CLI was killed at the timeout
    assert again.available and again.version == "0.73.1"


async def test_a_first_check_that_times_out_is_not_remembered(fake_pi):
    environ, slow = fake_pi
    slow.touch()
    late = await detect_cached(PROVIDERS["pi"], environ)
    assert not late.available and "did not answer within" in late.reason
    slow.unlink()
    assert (await detect_cached(PROVIDERS["pi"], environ)).available  # asked again at once
