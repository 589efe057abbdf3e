"""A run gets no bash tool that can only fail: without bubblewrap the sandbox cannot start,
so its mode is off (and the start-up log says in one line how to get it)."""

from __future__ import annotations

import logging

import pytest

from agent.core.model.demo import plan
from agent.runs import sandbox


@pytest.mark.parametrize(
    ("setting", "bwrap", "enabled", "mode"),
    [
        ("sandbox", "/usr/bin/bwrap", True, "sandbox"),
        ("sandbox", None, True, "off"),
        ("sandbox", "/usr/bin/bwrap", False, "off"),
        ("unsafe", None, True, "unsafe"),
        ("off", "/usr/bin/bwrap", True, "off"),
    ],
)
def test_bash_is_off_when_the_sandbox_cannot_start(settings, monkeypatch, setting, bwrap,
                                                   enabled, mode):  # fmt: skip
    settings.HARNESS_BASH = setting
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: bwrap)
    assert sandbox.bash_mode(enabled) == mode


def test_start_up_says_how_to_get_bubblewrap(settings, monkeypatch, caplog):
    settings.HARNESS_BASH = "sandbox"
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    with caplog.at_level(logging.WARNING, logger="agent.runs.sandbox"):
        sandbox.check_at_startup()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "apt-get install bubblewrap" in lines[0]


def test_the_demos_help_lists_run_only_with_a_bash_tool():
    without, _ = plan("what can you do", {"read", "list_dir", "grep", "write", "edit"})
    assert "ls -la" not in without and "`write hello.py`" in without
    with_bash, _ = plan("what can you do", {"read", "list_dir", "grep", "write", "edit", "bash"})
    assert "`run ls -la`" in with_bash
