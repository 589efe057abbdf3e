"""The file host's clone (agent/sandbox/host_clone.py) and the descriptors it gets on the
host's socket (agent/sandbox/wire.py): what is refused before any git runs. The clone
itself, by a real host under a real broker, is tests/projects/test_projects_live.py's."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from agent.sandbox import git_forwarder, git_spawn, host_clone
from agent.sandbox.wire import WireError, read_frame, read_frame_fds, write_frame

PROJECT = "0a1b2c3d-0000-4000-8000-000000000000"
CLONE = {"action": "clone", "project": PROJECT, "url": "http://example.com/r.git",
         "seconds": 5}  # fmt: skip


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_frame_carries_its_descriptors_to_the_host_and_none_leak(tmp_path):
    ours, theirs = socket.socketpair()
    path = tmp_path / "relay.sock"
    with socket.socket(socket.AF_UNIX) as relay:
        relay.bind(str(path))
        relay.listen()
        sent = os.open(path, os.O_PATH)
        before = open_fds()
        writer = threading.Thread(target=lambda: (
            write_frame(ours, {"op": "git_clone"}, b"", [sent]),
            write_frame(ours, {"op": "browse"}, b"x" * 300_000),
            write_frame(ours, {"op": "tool"}, b"", [sent])))  # fmt: skip
        writer.start()
        header, _, fds = read_frame_fds(theirs)
        assert header["op"] == "git_clone" and len(fds) == 1
        assert not os.get_inheritable(fds[0])  # git, run by the host, never gets it
        # connected to through /proc, as the host does: the path itself is not in its view
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(f"/proc/self/fd/{fds[0]}")
            relay.accept()[0].close()
        os.close(fds[0])
        assert read_frame_fds(theirs)[1:] == (b"x" * 300_000, [])
        # a reader that takes no descriptors (the server's, of the host's answers) is
        # handed none: the kernel closes what came with the frame
        assert read_frame(theirs)[0]["op"] == "tool"
        writer.join()
        assert open_fds() == before
        os.close(sent)
    ours.close()
    theirs.close()


def test_a_bad_frame_closes_the_descriptors_that_came_with_it(tmp_path):
    ours, theirs = socket.socketpair()
    sent = os.open(tmp_path, os.O_PATH)
    before = open_fds()
    socket.send_fds(ours, [b"\xff\xff\xff\xff"], [sent])  # longer than any header
    with pytest.raises(WireError):
        read_frame_fds(theirs)
    assert open_fds() == before
    os.close(sent)
    ours.close()
    theirs.close()


def test_what_the_host_refuses_before_any_git_runs(tmp_path):
    with socket.socket(socket.AF_UNIX) as relay:
        relay.bind(str(tmp_path / "relay.sock"))
        sock = os.open(tmp_path / "relay.sock", os.O_PATH)
        plain = os.open(tmp_path, os.O_PATH)
        try:
            refusals = [
                ({**CLONE, "action": "push", "branch": "main"}, [sock], "clones only"),
                ({**CLONE, "url": "file:///etc"}, [sock], "url"),
                ({**CLONE, "project": "../../x"}, [sock], "UUID"),
                (CLONE, [], "one descriptor"),
                (CLONE, [plain], "one descriptor"),  # not a socket
                (CLONE, [sock, sock], "one descriptor"),
            ]
            for fields, fds, why in refusals:
                with pytest.raises(git_spawn.Refused, match=why):
                    host_clone.clone(fields, fds)
            # the host's own bound on clones at once, whatever the server sends
            for _ in range(host_clone.CLONES_AT_ONCE):
                assert host_clone._clones.acquire(blocking=False)
            try:
                with pytest.raises(git_spawn.Refused, match="at most 3 clones"):
                    host_clone.clone(CLONE, [sock])
            finally:
                for _ in range(host_clone.CLONES_AT_ONCE):
                    host_clone._clones.release()
        finally:
            os.close(sock)
            os.close(plain)


def test_the_broker_runs_no_clone_now_that_the_file_host_does():
    """Under a broker a clone is the file host's: the broker's ``git`` request refuses one
    before it opens anything (the request's path that nothing sends, closed)."""
    with pytest.raises(git_spawn.Refused, match="file host"):
        git_spawn.start(None, 1, CLONE, [], -1, [])


def test_git_gets_an_empty_home_of_its_own_in_a_long_lived_host(tmp_path):
    """In the host, /tmp lives as long as the host: each clone's git gets a HOME of its
    own (nothing planted there earlier, a ``.netrc`` say, is read)."""
    read, write = os.pipe()
    plan = {"run": [["/bin/sh", "-c", 'echo "$HOME"; ls -A "$HOME" | wc -l']], "cleanup": []}
    try:
        assert git_forwarder.run(plan, 30, write, str(tmp_path)) == 0
    finally:
        os.close(write)
    with os.fdopen(read) as said:
        assert said.read().split() == [str(tmp_path), "0"]
