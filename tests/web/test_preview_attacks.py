"""Attacks on previews from a hostile previewed server (the sandbox's code, or what a
prompt injection started there): answers that break HTTP in ways the relay must survive
without losing a reader's connection slot, a chunk declared huge (the server's memory),
headers that act on the app's whole origin rather than on the previewed page, and
requests given up while the sandbox is slow to answer (a reader's slot kept each time)."""

from __future__ import annotations

import asyncio
import json
from http.server import BaseHTTPRequestHandler

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from agent.runs import previews
from agent.sandbox.preview_mounts import SOCKET_NAME
from testkit.http_origin import serving
from tests.web import test_previews as base
from tests.web.test_previews import Browser, isolated, read, signed
from tests.web.test_sharing_pages import shared

people, state, forwarder = base.people, base.state, base.forwarder  # the fixtures

pytestmark = pytest.mark.django_db

BIG_CHUNK = 8 * 1024 * 1024
HOSTILE = {
    "/many-headers": b"HTTP/1.1 200 OK\r\n"
    + b"".join(b"X-%d: y\r\n" % n for n in range(150))
    + b"Content-Length: 2\r\n\r\nhi",
    "/folded": b"HTTP/1.1 200 OK\r\nX-Folded: one\r\n two\r\nContent-Length: 2\r\n\r\nhi",
    # Passed on, a 101 would make the front proxy tunnel the client's raw bytes to the app.
    "/switch": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: anything\r\n"
    b"Connection: Upgrade\r\n\r\n",
    "/only-interim": b"HTTP/1.1 103 Early Hints\r\n\r\n" * 20,
    "/early-hints": b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
    "/origin-wide": b'HTTP/1.1 200 OK\r\nClear-Site-Data: "cookies", "storage"\r\n'
    b"Strict-Transport-Security: max-age=31536000; includeSubDomains\r\n"
    b'Alt-Svc: h2="elsewhere.example:443"\r\nService-Worker-Allowed: /\r\n'
    b"X-Kept: yes\r\nContent-Length: 2\r\n\r\nhi",
}


class Hostile(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/big-chunk":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            self.wfile.write(b"%x\r\n" % BIG_CHUNK + b"x" * BIG_CHUNK + b"\r\n0\r\n\r\n")
        elif self.path == "/fine":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nfine")
        else:
            self.wfile.write(HOSTILE[self.path])
        self.close_connection = True

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def hostile():
    with serving(Hostile) as port:
        yield port


@pytest.mark.parametrize("answer", ["/many-headers", "/folded", "/switch", "/only-interim"])
def test_a_malformed_answer_is_a_502_and_gives_the_readers_slot_back(
    people, forwarder, hostile, settings, answer
):
    """A viewer of a shared conversation opens its preview: a server answering what the
    relay cannot pass on must not keep the viewer's slot (their previews everywhere), nor
    have the app answer a 101 to a plain request."""
    settings.HARNESS_PREVIEW_CONNECTIONS_PER_USER = 1
    conversation = shared(people, team=False)
    forwarder(conversation.id)
    viewer = Browser(people, "viewer")
    for _ in range(3):
        bad = viewer.get(signed(viewer, conversation.id, hostile, answer.lstrip("/")))
        isolated(bad)
        assert bad.status_code == 502, read(bad)
    fine = viewer.get(signed(viewer, conversation.id, hostile, "fine"))
    assert fine.status_code == 200 and read(fine) == b"fine"


def test_an_interim_answer_is_skipped(people, forwarder, hostile):
    conversation = shared(people)
    forwarder(conversation.id)
    client = Browser(people, "owner")
    answer = client.get(signed(client, conversation.id, hostile, "early-hints"))
    assert answer.status_code == 200 and read(answer) == b"hi"


def test_a_chunk_declared_huge_is_relayed_in_bounded_pieces(people, forwarder, hostile):
    """The relay never holds a whole chunk: a server declaring one of gigabytes would
    otherwise fill the web server's memory with it."""
    conversation = shared(people)
    forwarder(conversation.id)
    location = signed(Browser(people, "owner"), conversation.id, hostile, "big-chunk")

    async def pieces():
        response = await AsyncClient().get(location)
        assert response.status_code == 200
        return [len(piece) async for piece in response.streaming_content]

    sizes = async_to_sync(pieces)()
    assert sum(sizes) == BIG_CHUNK
    assert max(sizes) <= 65536


def test_headers_that_act_on_the_apps_origin_are_dropped(people, forwarder, hostile):
    """A previewed page shares the app's origin (without HARNESS_PREVIEW_ORIGIN): an
    answer's Clear-Site-Data would sign its reader out of the app, HSTS and Alt-Svc would
    be pinned for the app's host, a service worker's scope widened."""
    conversation = shared(people)
    forwarder(conversation.id)
    client = Browser(people, "owner")
    answer = client.get(signed(client, conversation.id, hostile, "origin-wide"))
    isolated(answer)
    assert answer.status_code == 200 and answer["X-Kept"] == "yes"
    for name in ("Clear-Site-Data", "Strict-Transport-Security", "Alt-Svc",
                 "Service-Worker-Allowed"):  # fmt: skip
        assert name not in answer, name


def test_a_request_given_up_while_the_forwarder_stalls_gives_the_slot_back(
    people, state, settings, monkeypatch
):
    """A hostile page in a reader's browser asks its own address, where whatever answers
    on the sandbox's socket never does, and aborts: each abort must not cost the reader
    one of their slots (all their previews, everywhere, would end up refused)."""
    settings.HARNESS_PREVIEW_CONNECTIONS_PER_USER = 1
    monkeypatch.setattr(previews, "CONNECT_TIMEOUT", 1.0)
    conversation = shared(people, team=False)
    monkeypatch.chdir(previews.directory(conversation.id))  # (a socket's address is short)
    location = signed(Browser(people, "viewer"), conversation.id, 8000)

    async def stall(reader, writer):
        await reader.read()  # never a word back

    async def scenario():
        server = await asyncio.start_unix_server(stall, path=SOCKET_NAME)
        async with server:
            for _ in range(3):
                given_up = asyncio.create_task(AsyncClient().get(location))
                await asyncio.sleep(0.3)
                given_up.cancel()
                await asyncio.gather(given_up, return_exceptions=True)
            return await AsyncClient().get(location)

    answer = async_to_sync(scenario)()
    assert answer.status_code == 502  # the forwarder's silence, not "too many previews"


class Gateway(BaseHTTPRequestHandler):
    """Stands in for the model gateway's forwarder on a CLI sandbox's loopback: whoever
    reaches it makes calls billed to the conversation's owner."""

    calls: list[str] = []

    def do_POST(self) -> None:
        Gateway.calls.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args) -> None:
        pass


def test_the_sandboxs_own_plumbing_is_not_previewed(people, forwarder, settings):
    """A viewer may not prompt, so may not spend the owner's budget: the CLI sandbox's
    model gateway port (and the egress proxy's) is never reached through a preview, nor
    listed among the ports."""
    from http.server import ThreadingHTTPServer
    from threading import Thread

    from agent.runs.llm_gateway import PORT_IN_SANDBOX

    try:
        gateway = ThreadingHTTPServer(("127.0.0.1", PORT_IN_SANDBOX), Gateway)
    except OSError:
        pytest.skip(f"port {PORT_IN_SANDBOX} is taken on this machine")
    Thread(target=gateway.serve_forever, daemon=True).start()
    try:
        conversation = shared(people, team=False)
        forwarder(conversation.id)
        viewer = Browser(people, "viewer")
        location = signed(viewer, conversation.id, PORT_IN_SANDBOX, "llm/anthropic/v1/messages")
        answer = viewer.post(location, data=b'{"model": "x"}', content_type="application/json")
        isolated(answer)
        assert answer.status_code == 403, read(answer)
        assert Gateway.calls == []
        listed = viewer.get(f"/api/conversations/{conversation.id}/ports")
        assert PORT_IN_SANDBOX not in [p["port"] for p in json.loads(read(listed))["ports"]]
    finally:
        gateway.shutdown()
        gateway.server_close()


@pytest.mark.parametrize("role", ["owner", "collaborator", "viewer"])
def test_the_cli_agents_sandbox_is_previewed_only_to_those_who_drive_it(
    people, state, settings, role
):
    """The CLI's sandbox holds the CLI (and what it serves to be driven, on its loopback):
    a viewer, who may not prompt it, reaches only the terminal's sandbox."""
    import subprocess
    import sys
    import time

    conversation = shared(people, team=False)
    path = previews.directory(conversation.id, previews.AGENT) / SOCKET_NAME
    child = subprocess.Popen([sys.executable, "-I", "-S", base.FORWARDER, SOCKET_NAME],
                             cwd=path.parent)  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not path.exists():
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        with serving(Hostile) as port:
            client = Browser(people, role)
            answer = client.get(signed(client, conversation.id, port, "fine"))
            listed = client.get(f"/api/conversations/{conversation.id}/ports")
        found = [p["port"] for p in json.loads(read(listed))["ports"]]
        if role == "viewer":
            assert answer.status_code == 502 and port not in found
        else:
            assert answer.status_code == 200 and read(answer) == b"fine" and port in found
    finally:
        child.terminate()
        child.wait(10)


IDENTITY = {  # what a front proxy adds to every request it passes to the app
    "X-Harness-Proxy-Secret": "the-deployments-proxy-secret",
    "X-Forwarded-User": "vera",
    "X-Forwarded-Access-Token": "vera-sso-access-token",
    "X-Forwarded-For": "203.0.113.9",
    "X-Real-IP": "203.0.113.9",
    "Forwarded": "for=203.0.113.9",
    "X-Auth-Request-Access-Token": "vera-sso-access-token",
    "X-Amzn-Oidc-Accesstoken": "vera-alb-token",
    "X-Goog-Iap-Jwt-Assertion": "vera-iap-jwt",
    "Cf-Access-Jwt-Assertion": "vera-cf-jwt",
    "X-Ms-Token-Aad-Access-Token": "vera-azure-token",
}


def test_a_front_proxys_secret_and_identity_headers_never_reach_the_previewed_server(
    people, forwarder, settings
):
    """Behind an authenticating proxy, every request to the app carries the proxy's
    secret (which signs anyone in as anyone) and often the reader's own tokens: the
    previewed server, the sandbox owner's code, must see none of them."""
    settings.HARNESS_TRUSTED_PROXY_HEADER = "X-Webauth-Name"
    conversation = shared(people, team=False)
    forwarder(conversation.id)
    viewer = Browser(people, "viewer")
    headers = {**IDENTITY, "X-Webauth-Name": "vera", "X-App-Own": "kept"}
    with serving(base.Upstream) as port:
        answer = viewer.get(signed(viewer, conversation.id, port), headers=headers)
    sent = {k.lower(): v for k, v in json.loads(read(answer))["headers"].items()}
    assert sent["x-app-own"] == "kept"
    leaked = {name for name in [*IDENTITY, "X-Webauth-Name"] if name.lower() in sent}
    assert not leaked
