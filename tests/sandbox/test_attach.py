"""The CLI pane's structured channel (finding 4): only the pipe the product opened for the
CLI's standard output becomes its log, and the log has a cap the CLI cannot push past."""

from __future__ import annotations

import os
import threading

import pytest

from agent.core.cli_agents.providers import PROVIDERS
from agent.core.cli_agents.session import CliExited, CliSession, SessionSpec
from agent.sandbox import attach


def _run_copy(tmp_path, chunks: list[bytes], cap: int):
    log = tmp_path / "pane.log"
    log.write_bytes(b"")
    read_fd, write_fd = os.pipe()
    screen_r, screen_w = os.pipe()
    saved = os.dup(1), os.dup(2)
    os.dup2(screen_w, 1)
    os.dup2(screen_w, 2)
    screen = bytearray()

    def watch() -> None:  # the pane: read as it comes, or the copier would block on it
        while data := os.read(screen_r, 1 << 20):
            screen.extend(data)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        copier = threading.Thread(target=attach.copy, args=(read_fd, str(log), cap))
        copier.start()
        for chunk in chunks:
            os.write(write_fd, chunk)
        os.close(write_fd)
        copier.join(10)
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, screen_w):
            os.close(fd)
    watcher.join(10)
    os.close(screen_r)
    return log.read_bytes(), bytes(screen)


def test_a_flood_past_the_cap_is_dropped_and_the_log_says_so(tmp_path):
    line = b'{"type":"assistant","message":"forged"}\n'
    log, screen = _run_copy(tmp_path, [line] * 20_000, cap=4096)
    assert len(log) <= 4096 + 1 + len(attach.CAPPED)
    assert log.endswith(attach.CAPPED.encode())
    assert screen.count(line) == 20_000  # the pane still shows everything
    assert b"passed its cap" in screen


def test_the_session_stops_reading_at_the_cap(tmp_path):
    spec = SessionSpec("c0ffee00-0000-4000-8000-000000000001", PROVIDERS["pi"], "/bin/true",
                       "/", str(tmp_path), str(tmp_path))  # fmt: skip
    session = CliSession(tmux=None, spec=spec)
    (tmp_path / "pane.log").write_text('{"type":"agent_start"}\n' + attach.CAPPED)
    with pytest.raises(CliExited, match="cap"):
        session._read_new()
