"""The broker's side of the egress socket (a real broker in a thread, as root): it binds
into a sandbox only a Unix socket the server owns, handed over by descriptor. A server
(or anyone speaking for it) sending a directory, a file or another uid's socket instead,
to have the broker mount it in a user's sandbox, is refused; so is a proxied command
without its sandbox."""

from __future__ import annotations

import os
import socket
import sys
import threading

import pytest

from agent.sandbox import cli_spawn, client, egress_socket
from agent.sandbox.broker import Broker
from agent.sandbox.spawn import BrokerConfig
from tests.conftest import REPO, require_bwrap
from tests.egress.conftest import BODY

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)"),
]

SERVICE = 65534  # the service user's uid in these tests
UID_BASE, USER = 300000, 7


@pytest.fixture
def config(tmp_path):
    prefix = os.path.realpath(sys.base_prefix)
    return BrokerConfig(service_uid=SERVICE, service_gid=SERVICE, uid_base=UID_BASE,
                        workspaces=str(tmp_path / "workspaces"), cgroups="off",
                        python_prefix=prefix, python=os.path.realpath(sys.executable),
                        app=str(REPO))  # fmt: skip


@pytest.fixture
def sandbox(config, tmp_path):
    """The user's side of a running broker."""
    require_bwrap()
    root = tmp_path / "workspaces" / str(USER)
    root.mkdir(parents=True, mode=0o700)
    os.chown(root, UID_BASE + USER, UID_BASE + USER)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    broker = Broker(config)
    threading.Thread(target=broker.serve, args=(theirs,), daemon=True).start()
    yield client.Broker(ours).sandbox(USER)
    ours.close()
    broker.shutdown()


def _socket_file(path, uid: int) -> str:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.close()
    os.chown(path, uid, uid)
    return str(path)


@pytest.fixture
def planted(tmp_path):
    """What a server might send instead of its socket: {name: path}."""
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("secret\n")
    os.chown(tmp_path / "dir", SERVICE, SERVICE)
    os.chown(tmp_path / "file", SERVICE, SERVICE)
    return {
        "a directory": str(tmp_path / "dir"),
        "a file": str(tmp_path / "file"),
        "another uid's socket": _socket_file(tmp_path / "theirs.sock", UID_BASE + 8),
    }


@pytest.mark.parametrize("what", ["a directory", "a file", "another uid's socket"])
async def test_bash_is_refused_anything_but_the_servers_socket(sandbox, planted, what):
    with pytest.raises(client.BrokerError, match="not the server's egress socket"):
        await sandbox.bash("true", 30, 10_000, egress=planted[what])


async def test_an_unsandboxed_command_is_refused_the_proxy(sandbox, tmp_path):
    path = _socket_file(tmp_path / "ours.sock", SERVICE)
    with pytest.raises(client.BrokerError, match="unsandboxed"):
        await sandbox.bash("true", 30, 10_000, unsafe=True, egress=path)


async def test_bash_through_the_broker_reaches_the_proxy_and_only_it(
    sandbox, ada, allow, origin, proxied
):
    allow(f"127.0.0.1:{origin}")
    proxy = await proxied(ada)
    os.chown(proxy.path, SERVICE, SERVICE)
    os.chmod(proxy.path, 0o666)  # as the server leaves it: it goes in by descriptor
    url = f"http://127.0.0.1:{origin}/"
    command = f"curl -sS --max-time 20 {url}; curl -sS --max-time 5 --noproxy '*' {url}"
    result, _, _ = await sandbox.bash(command, 60, 100_000, egress=proxy.path)
    assert result.output.count(BODY.decode()) == 1, result.output


def test_a_cli_ticket_checks_the_egress_socket_the_same_way(config, planted, tmp_path):
    message = {"conversation": "0" * 32, "program": "true", "egress": True}
    with pytest.raises(cli_spawn.Refused, match="missing"):
        cli_spawn.validate(message, [], config)
    for path in planted.values():
        fd = os.open(path, os.O_PATH)
        try:
            with pytest.raises(cli_spawn.Refused, match="not the server's egress socket"):
                cli_spawn.validate(message, [fd], config)
        finally:
            os.close(fd)
    ours = os.open(_socket_file(tmp_path / "ours.sock", SERVICE), os.O_PATH)
    gateway = os.open(_socket_file(tmp_path / "gateway.sock", SERVICE), os.O_PATH)
    try:
        spec = cli_spawn.validate(message, [gateway, ours], config)
        assert (spec["gateway_fd"], spec["egress_fd"]) == (gateway, ours)
        spec = cli_spawn.validate({**message, "egress": False}, [gateway], config)
        assert (spec["gateway_fd"], spec["egress_fd"]) == (gateway, None)
        with pytest.raises(egress_socket.Refused, match="at most one"):
            egress_socket.checked([ours, ours], SERVICE)
    finally:
        os.close(ours)
        os.close(gateway)
