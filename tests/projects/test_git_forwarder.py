"""The sandbox's git forwarder (agent/sandbox/git_forwarder.py) on its own: how it relays
git's connections and runs the plan's steps."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from agent.sandbox import git_forwarder


def test_a_relayed_connection_sends_each_write_at_once(tmp_path):
    """git waits for the relay's last small write (the empty chunk) before its next
    request: the connection it is relayed on must not hold that back (Nagle)."""
    path = str(tmp_path / "relay.sock")
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    upstream.bind(path)
    upstream.listen(1)
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    relaying = threading.Thread(target=git_forwarder.relay, args=(accepted, path), daemon=True)
    relaying.start()
    theirs, _ = upstream.accept()  # the forwarder reached the relay: the connection is set up
    try:
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        client.sendall(b"GET /git/info/refs")
        assert theirs.recv(100) == b"GET /git/info/refs"
        theirs.sendall(b"0\r\n\r\n")
        assert client.recv(100) == b"0\r\n\r\n"
    finally:
        client.close()
        theirs.close()
        relaying.join(10)
        for sock in (server, upstream):
            sock.close()


def test_the_steps_run_in_order_and_a_failure_runs_the_cleanup(tmp_path):
    done = tmp_path / "done"
    plan = {"run": [["/bin/true"], ["/bin/sh", "-c", "exit 3"], ["/bin/touch", str(done)]],
            "cleanup": [["/bin/touch", str(tmp_path / "cleaned")]]}  # fmt: skip
    assert git_forwarder.run(plan, 30) == 3
    assert not done.exists() and (tmp_path / "cleaned").exists()


def test_a_step_past_the_time_limit_is_stopped(tmp_path):
    plan = {"run": [["/bin/sleep", "60"], ["/bin/touch", str(tmp_path / "next")]],
            "cleanup": [["/bin/touch", str(tmp_path / "cleaned")]]}  # fmt: skip
    assert git_forwarder.run(plan, 0.2) == 124
    assert not (tmp_path / "next").exists() and (tmp_path / "cleaned").exists()


def test_every_word_goes_to_the_output_given_and_the_listener_ends_when_closed(tmp_path):
    """The file host runs plans for several clones at once: each one's output (its steps',
    git's stdout and stderr, the forwarder's own words) goes to that clone's pipe alone,
    and its listener ends with it."""
    read, write = os.pipe()
    plan = {"run": [["/bin/sh", "-c", "echo out; echo err >&2"],
                    {"do": "branch", "path": str(tmp_path)}],
            "cleanup": [["/bin/sh", "-c", "echo cleaned"]]}  # fmt: skip
    (tmp_path / "HEAD").write_text("0123abcd\n")  # detached: names no branch
    try:
        assert git_forwarder.run(plan, 30, write) == 1
    finally:
        os.close(write)
    with os.fdopen(read) as said:
        words = ["out", "err", "harness: the repository's HEAD names no branch", "cleaned"]
        assert said.read().splitlines() == words
    listener = git_forwarder.listen(str(tmp_path / "relay.sock"), 0)
    assert listener.port != 0
    time.sleep(0.1)  # its thread blocked in accept(), where a close alone would not end it
    listener.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", listener.port), timeout=5)
