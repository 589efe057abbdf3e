"""The git relay on its own: only the operation's smart-HTTP requests pass, the credential
goes to the remote and nowhere else, nothing of it comes back, redirects are refused."""

from __future__ import annotations

import base64
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import aiohttp
import pytest

from agent.core.egress_rules import parse_rules
from agent.models import User
from agent.runs.git_credentials import Credential
from agent.runs.git_relay import GitRelay, Scrubber
from agent.sandbox import git_spawn
from tests.projects.conftest import TOKEN as REMOTE_TOKEN

TOKEN = "relay-tok-5e8a1f"


def _over(relay: GitRelay) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=relay.socket_path))


async def _get(relay: GitRelay, path: str) -> tuple[int, bytes]:
    async with _over(relay) as http, http.get("http://relay" + path) as answer:
        return answer.status, await answer.read()


@pytest.fixture
def owner(transactional_db):
    """The relay's owner: whose rules, log rows and daily bytes it uses."""
    return User.objects.create(username="ada").id


async def test_only_the_operations_smart_http_requests_pass(net, remote, owner):
    remote_url = remote.url("demo.git")
    credential = Credential("ada-git", REMOTE_TOKEN)
    async with GitRelay(owner, remote_url, credential) as relay, _over(relay) as http:
        base = "http://relay/git"
        async with http.get(f"{base}/info/refs?service=git-upload-pack") as ok:
            assert ok.status == 200 and b"refs/heads/main" in await ok.read()
        for method, path in (("GET", "/info/refs?service=git-receive-pack"),
                             ("POST", "/git-receive-pack"),
                             ("GET", "/HEAD"), ("GET", "/objects/info/packs"),
                             ("GET", "/info/refs?service=git-upload-pack&x=1"),
                             ("GET", "/info/refs"), ("POST", "/info/refs"),
                             ("GET", "/../../etc/passwd")):  # fmt: skip
            async with http.request(method, base + path) as refused:
                assert refused.status == 404, path
        async with http.get("http://relay/other.git/info/refs?service=git-upload-pack") as r:
            assert r.status == 404
    assert all(seen.authorization for seen in remote.requests)
    assert all("receive-pack" not in seen.path for seen in remote.requests)
    async with GitRelay(owner, remote_url, credential, push=True) as relay:
        assert (await _get(relay, "/git/info/refs?service=git-receive-pack"))[0] == 200


class _Echo(BaseHTTPRequestHandler):
    """A remote that echoes the request's Authorization, or redirects elsewhere."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        if "redirect" in self.path:
            self.send_response(302)
            self.send_header("Location", "http://elsewhere.example/x.git/info/refs")
            self.end_headers()
            return
        body = f"you sent {self.headers.get('Authorization')} and {TOKEN}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-git-upload-pack-advertisement")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def echo(settings):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{server.server_address[1]}"
    settings.HARNESS_EGRESS_ALLOW = parse_rules(host)
    yield host
    server.shutdown()
    server.server_close()


async def test_a_remote_echoing_the_credential_gets_it_scrubbed_on_the_way_back(echo, owner):
    credential = Credential("ada-git", TOKEN)
    async with GitRelay(owner, f"http://{echo}/r.git", credential) as relay:
        _, body = await _get(relay, "/git/info/refs?service=git-upload-pack")
    basic = base64.b64encode(f"ada-git:{TOKEN}".encode())
    assert b"you sent Basic [credential] and [credential]" in body
    assert TOKEN.encode() not in body and basic not in body


async def test_a_redirect_is_refused_and_the_credential_not_sent_on(echo, owner):
    credential = Credential("ada-git", TOKEN)
    url = f"http://{echo}/redirect.git"
    async with GitRelay(owner, url, credential) as relay:
        status, body = await _get(relay, "/git/info/refs?service=git-upload-pack")
    text = body.decode()
    assert status == 502 and "redirects to" in text and "use that URL" in text
    assert "redirects to" in relay.problem


def test_the_scrubber_finds_a_secret_split_across_chunks():
    scrubber = Scrubber([b"SECRET-TOKEN"])
    data = b"aaaSECRET-TOKENbbbSECRET-TOKEN"
    out = b""
    for i in range(0, len(data), 4):
        out += scrubber.feed(data[i : i + 4])
    out += scrubber.end()
    assert out == b"aaa[credential]bbb[credential]"
    assert Scrubber([]).feed(b"as is") == b"as is"


@pytest.mark.parametrize("message, why", [
    ({"action": "fetch", "project": "0" * 32, "seconds": 5}, "action"),
    ({"action": "clone", "project": "../../etc", "url": "http://h/r", "seconds": 5}, "UUID"),
    ({"action": "push", "project": "0" * 32, "seconds": 5}, "branch"),
    ({"action": "push", "project": "0" * 32, "branch": "-o evil", "seconds": 5}, "branch"),
    ({"action": "push", "project": "0" * 32, "branch": "a/../b", "seconds": 5}, "branch"),
    ({"action": "clone", "project": "0" * 32, "url": "file:///etc", "seconds": 5}, "url"),
    ({"action": "clone", "project": "0" * 32, "url": "http://h/r\n-c x", "seconds": 5}, "url"),
    ({"action": "clone", "project": "0" * 32, "url": "http://h/r", "seconds": "5"}, "seconds"),
])  # fmt: skip
def test_the_brokers_git_request_is_checked(message, why):
    with pytest.raises(git_spawn.Refused) as refused:
        git_spawn.validate(message)
    assert why in str(refused.value)


def test_the_repository_path_comes_from_the_project_id_alone():
    project = "0a1b2c3d-0000-4000-8000-000000000000"
    assert git_spawn.project_repository(project) == (
        ".harness-projects/0a1b2c3d000040008000000000000000/repo.git")  # fmt: skip
    spec = git_spawn.validate({"action": "push", "project": project, "branch": "harness/1",
                               "seconds": 9})  # fmt: skip
    commands = git_spawn.plan(spec)["run"]
    assert commands[-1][-1] == "{commit}:refs/heads/harness/1"
    assert commands[0]["argv"][-1] == "refs/heads/harness/1^{commit}"
    gits = [step["argv"] if isinstance(step, dict) else step for step in commands]
    assert all("core.hooksPath=/dev/null" in argv for argv in gits if argv[0] == git_spawn.GIT)


def test_a_clone_is_one_git_process_reaching_the_remotes_url_through_the_relay():
    url = "https://example.com/team/app.git"
    spec = git_spawn.validate({"action": "clone", "project": "0a1b2c3d-0000-4000-8000-000000000000",
                               "url": url, "seconds": 9})  # fmt: skip
    gits = [step for step in git_spawn.plan(spec)["run"] if isinstance(step, list)]
    assert len(gits) == 1  # origin's URL is recorded by the clone itself
    clone = gits[0]
    assert clone[clone.index("--") + 1] == url  # what git records as origin's
    assert f"url.{git_spawn.RELAY_URL}.insteadOf={url}" in clone  # what it connects to
    assert "core.hooksPath=/dev/null" in clone and "protocol.allow=never" in clone
