"""What the broker binds for a terminal's previews: only a directory of the server's own,
sent as a descriptor, at its fixed place with the forwarder beside it; any other thing
the server could open (a file, someone else's directory, a descriptor too many) refused."""

from __future__ import annotations

import os
import uuid
from types import SimpleNamespace

import pytest

from agent.sandbox import cli_spawn, preview_mounts


def request(**fields) -> dict:
    return {"conversation": str(uuid.uuid4()), "program": "true", **fields}


@pytest.fixture
def opened():
    fds = []

    def open_path(path, flags=os.O_PATH | os.O_CLOEXEC) -> int:
        fds.append(os.open(path, flags))
        return fds[-1]

    yield open_path
    for fd in fds:
        os.close(fd)


def config(uid: int) -> SimpleNamespace:
    return SimpleNamespace(service_uid=uid, cli_roots=())


def test_the_servers_own_directory_is_bound_with_the_forwarder(tmp_path, opened):
    fd = opened(tmp_path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    spec = cli_spawn.validate(request(preview=True), [fd], config(os.stat(tmp_path).st_uid))
    assert spec["preview_fd"] == fd
    binds = preview_mounts.binds(["--bind-fd", str(fd)])
    assert binds[-3:] == ["--bind-fd", str(fd), f"{preview_mounts.IN_SANDBOX}/socket"]
    at = binds.index("--ro-bind")
    assert binds[at + 1 : at + 3] == [preview_mounts.FORWARDER,
                                      f"{preview_mounts.IN_SANDBOX}/forwarder.py"]  # fmt: skip


def test_another_users_directory_is_refused(tmp_path, opened):
    fd = opened(tmp_path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    other = os.stat(tmp_path).st_uid + 4242
    with pytest.raises(cli_spawn.Refused, match="not a directory of the server's"):
        cli_spawn.validate(request(preview=True), [fd], config(other))


def test_a_file_is_refused(tmp_path, opened):
    (tmp_path / "f").write_text("x")
    fd = opened(tmp_path / "f")
    with pytest.raises(cli_spawn.Refused, match="not a directory of the server's"):
        cli_spawn.validate(request(preview=True), [fd], config(os.stat(tmp_path).st_uid))


@pytest.mark.parametrize("preview, count, why", [
    (True, 0, "a descriptor the request names is missing"),
    (False, 2, "at most one descriptor"),
    (True, 3, "at most one descriptor"),
    ("yes", 1, "preview must be true or false"),
])  # fmt: skip
def test_descriptors_that_do_not_match_the_request_are_refused(tmp_path, opened, preview, count,
                                                               why):  # fmt: skip
    fds = [opened(tmp_path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for _ in range(count)]
    with pytest.raises(cli_spawn.Refused, match=why):
        cli_spawn.validate(request(preview=preview), fds, config(os.stat(tmp_path).st_uid))


def test_the_shells_start_is_unchanged_after_the_forwarders():
    """The forwarder starts in a session of its own, its input and output away from the
    terminal; then the shell's own start, as it was."""
    from agent.sandbox.terminal_attach import PROGRAM

    assert preview_mounts.START.startswith("setsid -f ")
    assert "</dev/null >/dev/null 2>&1; " in preview_mounts.START
    assert (preview_mounts.START + PROGRAM).endswith("; " + PROGRAM)


def test_a_ticket_carries_the_gateway_the_egress_proxy_and_the_previews_each_in_its_place(
    tmp_path, opened
):
    import socket

    made = []
    for name in ("gateway", "egress"):
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(tmp_path / name))
        made.append(server)
    try:
        gateway, egress = (opened(tmp_path / name) for name in ("gateway", "egress"))
        directory = opened(tmp_path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        spec = cli_spawn.validate(request(egress=True, preview=True),
                                  [gateway, egress, directory],
                                  config(os.stat(tmp_path).st_uid))  # fmt: skip
        assert (spec["gateway_fd"], spec["egress_fd"], spec["preview_fd"]) == (
            gateway, egress, directory)  # fmt: skip
        with pytest.raises(cli_spawn.Refused, match="not a directory of the server's"):
            cli_spawn.validate(request(egress=True, preview=True), [gateway, directory, egress],
                               config(os.stat(tmp_path).st_uid))  # fmt: skip
    finally:
        for server in made:
            server.close()
