"""A pane's output stream (agent/core/terminal/stream.py): bounded on disk however much the
pane prints, read in order across its files, a reader that fell behind told so (its page
then gets the screen), a new session's instance replacing the old; and a CLI's JSON drawn
as a person reads it, with nothing of the model's able to steer the terminal."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from agent.core.cli_agents.pane_view import PaneView, clean
from agent.core.terminal import stream
from tests.conftest import REPO


def _write(directory, chunks: list[bytes], cap: int) -> None:
    read_fd, write_fd = os.pipe()
    writer = threading.Thread(target=stream.write, args=(read_fd, str(directory), cap))
    writer.start()
    for chunk in chunks:
        os.write(write_fd, chunk)
    os.close(write_fd)
    writer.join(10)
    os.close(read_fd)


def _size(directory) -> int:
    return sum(p.stat().st_size for p in directory.iterdir())


def test_a_flood_keeps_at_most_three_files_of_the_cap(tmp_path):
    cap = 65536
    _write(tmp_path, [b"y\n" * 16384] * 200, cap)  # 6.4 MB printed
    assert len(list(tmp_path.iterdir())) <= 2  # the last two remain once it stopped
    assert _size(tmp_path) <= 2 * cap
    assert stream.generations(str(tmp_path))[-1] >= 90


def test_the_writer_as_tmux_runs_it_bounds_the_disk_too(tmp_path):
    done = subprocess.run([sys.executable, "-m", "agent.core.terminal.stream", str(tmp_path),
                           "65536"], input=b"x" * (3 << 20), cwd=REPO, timeout=60)  # fmt: skip
    assert done.returncode == 0
    assert _size(tmp_path) <= 2 * 65536


def test_a_reader_follows_across_files_in_order(tmp_path):
    cap = 65536
    reader = stream.Reader(str(tmp_path), at_end=False)
    assert reader.read() == b""  # nothing written yet
    read_fd, write_fd = os.pipe()
    writer = threading.Thread(target=stream.write, args=(read_fd, str(tmp_path), cap))
    writer.start()
    sent, got = bytearray(), bytearray()
    for i in range(40):  # 40 chunks of 16 KiB: ten files, read as they come
        chunk = bytes([65 + i % 26]) * 16384
        os.write(write_fd, chunk)
        sent += chunk
        while len(got) < len(sent):
            got += reader.read()
    os.close(write_fd)
    writer.join(10)
    os.close(read_fd)
    assert bytes(got) == bytes(sent)
    assert reader.generation >= 8
    reader.close()


def _ends_with(directory, tail: bytes) -> bool:
    found = stream.generations(str(directory))
    try:
        return bool(found) and (directory / stream.file_name(found[-1])).read_bytes().endswith(tail)
    except FileNotFoundError:  # (the writer moved on meanwhile)
        return False


def test_a_reader_that_fell_behind_is_told_and_one_at_the_end_reads_only_new_output(tmp_path):
    cap = 65536
    reader = stream.Reader(str(tmp_path), at_end=False)
    read_fd, write_fd = os.pipe()
    writer = threading.Thread(target=stream.write, args=(read_fd, str(tmp_path), cap))
    writer.start()
    os.write(write_fd, b"a" * 1000)
    while not reader.read(10):  # it opened the first file
        pass
    for _ in range(20):
        os.write(write_fd, b"b" * 60000)
    os.write(write_fd, b"end")
    while not _ends_with(tmp_path, b"end"):  # the writer has caught up with the flood
        pass
    late = stream.Reader(str(tmp_path), at_end=True)
    os.write(write_fd, b"new")
    while not (seen := late.read()):
        pass
    assert seen == b"new"  # from the end: nothing of the flood
    os.close(write_fd)
    writer.join(10)
    os.close(read_fd)
    with pytest.raises(stream.Lost):
        while reader.read():
            pass
    reader.close()
    late.close()


def test_a_new_session_replaces_the_old_instance(tmp_path):
    first = stream.new_instance(str(tmp_path))
    assert stream.current(str(tmp_path)) == os.path.basename(first)
    second = stream.new_instance(str(tmp_path))
    assert stream.current(str(tmp_path)) == os.path.basename(second)
    assert not os.path.exists(first) and os.path.isdir(second)
    (tmp_path / "current").write_text("../../etc")  # not an instance's name
    assert stream.current(str(tmp_path)) is None


def test_the_pipe_command_quotes_what_it_is_given(tmp_path):
    command = stream.pipe_command("/usr/bin/python3", "/app dir", "/state/$(reboot)/x")
    assert "'/state/$(reboot)/x'" in command and "'/app dir'" in command


HOSTILE = "before\x1b]0;owned\x07\x1b[2J\x1b[?1049h\x9b31mafter\r\x08\x07"


def test_a_clis_json_is_drawn_as_text_and_its_controls_are_dropped():
    view = PaneView("claude-code")
    text = '{"type":"assistant","message":{"content":[{"type":"text","text":%s}]}}'
    import json

    drawn = view.line(text % json.dumps(HOSTILE))
    assert "before" in drawn and "after" in drawn
    assert "\x1b]" not in drawn and "\x1b[2J" not in drawn and "\x9b" not in drawn
    assert "{" not in drawn  # not the JSON itself
    call = ('{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1",'
            '"name":"Bash","input":{"command":"ls -la"}}]}}')  # fmt: skip
    assert "Bash" in view.line(call) and "ls -la" in view.line(call)
    assert view.line("a notice\x1b[2J") == "a notice[2J\n"  # not JSON: shown, cleaned
    assert clean(HOSTILE) == "before]0;owned[2J[?1049h31mafter"
