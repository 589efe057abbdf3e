"""A real bwrap sandbox (its own network namespace, as an unprivileged uid): curl reaches
an admitted origin through the proxy's socket and the connection is logged; without the
proxy nothing is reachable, neither the host's loopback nor a public address."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

import agent.sandbox
from agent.core.tools import bwrap
from agent.models import EgressLog
from tests.conftest import require_bwrap
from tests.egress.conftest import BODY

pytestmark = pytest.mark.django_db(transaction=True)

FORWARDER = Path(agent.sandbox.__file__).parent / "egress_forwarder.py"
PORT = 3128


async def sandboxed(socket_path: str, *command: str) -> tuple[int, str]:
    """``command`` in a fresh bwrap sandbox with the proxy's socket bound in, as nobody."""
    bwrap = require_bwrap()
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--uid", "65534", "--gid", "65534",
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--tmpfs", "/run", "--bind", socket_path, "/run/egress.sock", "--",
            "/usr/bin/python3", "-I", "-S", str(FORWARDER), "/run/egress.sock", str(PORT),
            *command]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    output, _ = await process.communicate()
    return process.returncode, output.decode(errors="replace")


CURL = ("/usr/bin/curl", "-sS", "--max-time", "20")


async def test_curl_in_a_sandbox_reaches_an_admitted_origin(ada, allow, origin, proxied):
    allow(f"127.0.0.1:{origin}")
    proxy = await proxied(ada)
    os.chmod(proxy.path, 0o666)
    status, output = await sandboxed(proxy.path, *CURL, f"http://127.0.0.1:{origin}/")
    assert status == 0 and BODY.decode() in output, output
    row = await EgressLog.objects.aget()
    assert row.allowed and row.user_id == ada.id and row.port == origin and row.bytes_down


async def test_curl_in_a_sandbox_is_refused_what_no_rule_admits(ada, allow, origin, proxied):
    proxy = await proxied(ada)
    os.chmod(proxy.path, 0o666)
    status, output = await sandboxed(proxy.path, *CURL, "-i", f"http://127.0.0.1:{origin}/")
    assert "403" in output and "no egress rule admits 127.0.0.1" in output, output
    assert not (await EgressLog.objects.aget()).allowed


@pytest.mark.parametrize("url", ["http://127.0.0.1:{origin}/", "http://1.1.1.1/",
                                 "http://[::1]:{origin}/", "http://example.com/"])  # fmt: skip
async def test_without_the_proxy_nothing_is_reachable(ada, allow, origin, proxied, url):
    """The kernel bypass: even with a rule admitting the origin, a process that ignores
    the proxy variables reaches neither the host's loopback, nor a public address, nor DNS."""
    allow(f"127.0.0.1:{origin}, 1.1.1.1, example.com")
    proxy = await proxied(ada)
    os.chmod(proxy.path, 0o666)
    target = url.format(origin=origin)
    status, output = await sandboxed(proxy.path, *CURL, "--noproxy", "*", target)
    assert status != 0 and BODY.decode() not in output, output
    assert not await EgressLog.objects.aexists()


@pytest.mark.parametrize("run_as, by", [(None, "descriptor"), ((65534, 65534), "descriptor"),
                                        (None, "path")])  # fmt: skip
async def test_the_bash_sandbox_line_reaches_the_proxy_and_nothing_else(
    ada, allow, origin, proxied, tmp_path, run_as, by
):
    """The product's bwrap line (``sandbox_argv`` with ``egress``), unprivileged
    and privileged-dropping, the socket given as a descriptor or (tmux starting a server's
    sandbox, where none can pass) by its path: curl through the proxy works, around it
    nothing does."""
    allow(f"127.0.0.1:{origin}")
    proxy = await proxied(ada)
    os.chmod(proxy.path, 0o666)
    workspace = tmp_path / "ws"
    workspace.mkdir(mode=0o777)
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    egress = os.open(proxy.path, os.O_PATH)
    try:
        url = f"http://127.0.0.1:{origin}/"
        command = f"curl -sS --max-time 20 {url}; echo; curl -sS --max-time 5 --noproxy '*' {url}"
        given = egress if by == "descriptor" else proxy.path
        argv = bwrap.sandbox_argv(require_bwrap(), fd, command, run_as, egress=given)
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            pass_fds=(fd, egress),
        )  # fmt: skip
        output = (await process.communicate())[0].decode(errors="replace")
    finally:
        os.close(fd)
        os.close(egress)
    assert output.count(BODY.decode()) == 1, output  # the first, not the second
    assert "Failed to connect" in output or "Couldn't connect" in output, output
    assert (await EgressLog.objects.aget()).allowed
