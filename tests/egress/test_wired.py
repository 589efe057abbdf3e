"""``HARNESS_EGRESS=proxy`` as a conversation's bash tool has it (a real bwrap sandbox as
the user's uid, the proxy in this test's loop): curl, Python's urllib, pip and git reach
what a rule names through ``HTTP_PROXY`` and nothing else; a refusal names the host; a
process ignoring the proxy reaches nothing; every connection is logged with its user and
conversation."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import os
import tarfile
import threading
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.core.tools.bash import BashTool
from agent.core.tools.workspace import Workspace
from agent.models import Conversation, EgressLog
from agent.runs import egress, git_credentials
from agent.runs.workspaces import conversation_workspace, sandbox_ids
from testkit.git_server import GitServer
from tests.conftest import require_bwrap
from tests.egress.conftest import BODY

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def proxy_on(settings):
    settings.HARNESS_EGRESS = "proxy"


@pytest.fixture
async def conversation(ada, proxy_on):
    return await Conversation.objects.acreate(owner=ada)


@pytest.fixture
async def bash(ada, conversation, tmp_path):
    """The bash tool of ``conversation``: a workspace of the user's uid, the egress hook
    the server gives it."""
    require_bwrap()
    root = tmp_path / "ws"
    root.mkdir()
    ids = sandbox_ids(ada.id)
    if ids is not None:
        os.chown(root, *ids)
    workspace = Workspace(root)
    workspace.egress = partial(egress.socket_for, ada.id, conversation.id)
    tool = BashTool(workspace, "sandbox")
    yield tool
    await egress.sockets().close()
    workspace.close()


async def run(tool: BashTool, command: str) -> str:
    result = await tool.execute({"command": command})
    return (
        json.loads(result.content).get("output", "")
        if result.content.startswith("{")
        else (result.content)
    )


async def test_curl_and_urllib_reach_a_named_origin_and_the_log_says_who(
    bash, allow, origin, ada, conversation
):
    allow(f"127.0.0.1:{origin}")
    url = f"http://127.0.0.1:{origin}/"
    urllib = f'import urllib.request; print(urllib.request.urlopen("{url}").read().decode())'
    output = await run(bash, f"curl -sS --max-time 20 {url} && python3 -c '{urllib}'")
    assert output.count(BODY.decode()) == 2, output
    rows = [row async for row in EgressLog.objects.all()]
    assert len(rows) == 2 and all(r.allowed for r in rows)
    assert {(r.user_id, r.conversation_id, r.port) for r in rows} == {
        (ada.id, conversation.id, origin)
    }
    assert "through an allow-listing proxy" in bash.description


async def test_a_host_no_rule_names_is_a_403_naming_it(bash, allow, origin):
    output = await run(bash, f"curl -sS --max-time 20 http://127.0.0.1:{origin}/")
    assert f"egress refused: 127.0.0.1:{origin}: no egress rule admits" in output, output
    assert not (await EgressLog.objects.aget()).allowed


async def test_a_process_ignoring_the_proxy_reaches_nothing(bash, allow, origin):
    """Even with a rule naming the origin: the sandbox has no route but the proxy's, and no
    DNS (the kernel refuses, not the proxy)."""
    allow(f"127.0.0.1:{origin}, example.com")
    command = (
        f"curl -sS --max-time 5 --noproxy '*' http://127.0.0.1:{origin}/; echo; "
        "curl -sS --max-time 5 --noproxy '*' http://example.com/; echo; "
        "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), timeout=5)'"
    )
    output = await run(bash, command)
    assert BODY.decode() not in output
    assert "Failed to connect" in output or "Couldn't connect" in output, output
    assert "Could not resolve host" in output, output
    assert "Network is unreachable" in output, output
    assert not await EgressLog.objects.aexists()


def _wheel(name: str, version: str) -> tuple[str, bytes]:
    """A minimal pure-Python wheel, its RECORD hashed as pip expects."""
    files = {
        f"{name}/__init__.py": b"WORD = 'installed through the proxy'\n",
        f"{name}-{version}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
        ),
        f"{name}-{version}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    record += f"{name}-{version}.dist-info/RECORD,,\n"
    files[f"{name}-{version}.dist-info/RECORD"] = record.encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return f"{name}-{version}-py3-none-any.whl", buffer.getvalue()


@pytest.fixture
def index(tmp_path):
    """A simple package index (PEP 503) with one wheel, served on loopback."""
    root = tmp_path / "index"
    (root / "simple" / "tinypkg").mkdir(parents=True)
    wheel, data = _wheel("tinypkg", "1.0")
    (root / wheel).write_bytes(data)
    (root / "simple" / "tinypkg" / "index.html").write_text(
        f'<html><body><a href="../../{wheel}">{wheel}</a></body></html>'
    )
    yield from _served(root)


class _Files(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def _served(root, ready=lambda port: None):
    """``root``'s files over http on loopback: its port (``ready`` first told it)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Files, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ready(server.server_address[1])
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


async def test_pip_downloads_and_installs_from_a_named_index(bash, allow, index):
    allow(f"127.0.0.1:{index}")
    pip = (
        "python3 -m pip --disable-pip-version-check --no-cache-dir --no-input -q {} "
        f"--index-url http://127.0.0.1:{index}/simple/ tinypkg"
    )
    command = (
        f"{pip.format('download -d /tmp/dl')} && ls /tmp/dl && "
        f"{pip.format('install --no-deps --target /tmp/site')} && "
        "PYTHONPATH=/tmp/site python3 -c 'import tinypkg; print(tinypkg.WORD)'"
    )
    output = await run(bash, command)
    assert "tinypkg-1.0-py3-none-any.whl" in output, output
    assert "installed through the proxy" in output, output
    assert await EgressLog.objects.filter(allowed=True, port=index).acount() >= 2


async def test_git_clones_through_the_proxy_which_adds_the_users_credential(bash, allow, ada):
    with GitServer(user="ada", token="s3cret") as remote:
        remote.make_repository("demo.git", {"README": "cloned through the proxy\n"})
        host = remote.host
        allow(host)
        await asyncio.to_thread(git_credentials.store, ada, host, "ada", "s3cret")
        command = (
            f"git -c credential.helper= clone -q {remote.url('demo.git')} /tmp/demo && "
            "cat /tmp/demo/README"
        )
        output = await run(bash, f"GIT_TERMINAL_PROMPT=0 {command}")
        assert "cloned through the proxy" in output, output
        assert all(seen.authorization for seen in remote.requests)


async def test_a_conversations_workspace_gets_the_hook_only_with_the_proxy(
    settings, ada, conversation
):
    with_proxy = await asyncio.to_thread(conversation_workspace, conversation)
    assert with_proxy.egress is not None
    settings.HARNESS_EGRESS = "off"
    without = await asyncio.to_thread(conversation_workspace, conversation)
    assert without.egress is None
    assert "there is no network" in BashTool(without, "sandbox").description


def _npm_tarball(name: str, version: str) -> bytes:
    package = json.dumps({"name": name, "version": version, "main": "index.js"}).encode()
    code = b"module.exports = 'installed by npm through the proxy';\n"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, data in (("package/package.json", package), ("package/index.js", code)):
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def registry(tmp_path):
    """An npm registry on loopback with one package: its packument and its tarball."""
    root = tmp_path / "registry"
    (root / "tarballs").mkdir(parents=True)
    tarball = _npm_tarball("tinynpm", "1.0.0")
    (root / "tarballs" / "tinynpm-1.0.0.tgz").write_bytes(tarball)
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()

    def packument(port: int) -> None:
        dist = {"tarball": f"http://127.0.0.1:{port}/tarballs/tinynpm-1.0.0.tgz",
                "integrity": integrity}  # fmt: skip
        version = {"name": "tinynpm", "version": "1.0.0", "dist": dist}
        (root / "tinynpm").write_text(json.dumps({"name": "tinynpm", "versions": {
            "1.0.0": version}, "dist-tags": {"latest": "1.0.0"}}))  # fmt: skip

    yield from _served(root, packument)


async def test_npm_installs_from_a_named_registry(bash, allow, registry):
    allow(f"127.0.0.1:{registry}")
    command = (
        "mkdir /tmp/app && cd /tmp/app && npm install --no-audit --no-fund --cache /tmp/npm "
        f"--registry http://127.0.0.1:{registry}/ tinynpm >/dev/null && "
        "node -e 'console.log(require(\"tinynpm\"))'"
    )
    output = await run(bash, command)
    assert "installed by npm through the proxy" in output, output
    assert await EgressLog.objects.filter(allowed=True, port=registry).acount() >= 2
