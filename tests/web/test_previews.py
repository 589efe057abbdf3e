"""Previews through the server (a forwarder process standing in for the terminal's
sandbox, a real server on loopback behind it): who may open them (owner, collaborator,
viewer, team, stranger, anonymous, a revoked share), the sandboxing policy and no referrer
on every answer (errors too), cookies kept out both ways, signed addresses (tampered,
another port's, another conversation's), ports out of range, nothing listening (a clear
502), the ports list, ``HARNESS_PREVIEW_ORIGIN``, a WebSocket relayed."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.test import AsyncClient, Client

from agent.models import Membership, User
from agent.runs import previews
from agent.web import preview_tokens
from agent.web.previews import SANDBOX_POLICY
from testkit.http_origin import serving
from tests.web.test_sharing_pages import READS, ROLES, shared

pytestmark = pytest.mark.django_db

FORWARDER = os.path.abspath(os.path.join("agent", "sandbox", "preview_forwarder.py"))


class Upstream(BaseHTTPRequestHandler):
    """Echoes what it was sent, and tries to set a cookie and its own policy."""

    def do_GET(self) -> None:
        self._answer(b"")

    def do_POST(self) -> None:
        self._answer(self.rfile.read(int(self.headers.get("Content-Length", 0))))

    def _answer(self, body: bytes) -> None:
        payload = json.dumps({"path": self.path, "headers": dict(self.headers.items()),
                              "body": body.decode()}).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "sessionid=planted; Path=/")
        self.send_header("Content-Security-Policy", "default-src *")
        self.send_header("X-Upstream", "yes")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def upstream():
    with serving(Upstream) as port:
        yield port


@pytest.fixture
def people():
    return {role: User.objects.create_user(name, password=f"pw-{name}-1234")
            for role, name in (("owner", "olga"), ("collaborator", "cole"), ("viewer", "vera"),
                               ("team", "tess"), ("stranger", "stan"))}  # fmt: skip


@pytest.fixture
def state(settings, tmp_path):
    settings.HARNESS_AGENT_STATE = tmp_path / "state"
    return settings.HARNESS_AGENT_STATE


def forwarders(wrapper: list[str] = ()):
    """A function starting the forwarder for a conversation, as the terminal's sandbox does
    (under ``wrapper``, e.g. a network namespace of its own), and the processes started."""
    started = []

    def start(conversation_id):
        path = previews.directory(conversation_id) / "s"
        # (relative: a test's directory is longer than a socket's address may be)
        child = subprocess.Popen([*wrapper, sys.executable, "-I", "-S", FORWARDER, "s"],
                                 cwd=path.parent)  # fmt: skip
        started.append(child)
        deadline = time.monotonic() + 20
        while not path.exists():  # the forwarder's own event: its socket appears
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        return path

    return start, started


@pytest.fixture
def forwarder(state):
    start, started = forwarders()
    yield start
    for child in started:
        child.terminate()
        child.wait(10)


class Browser:
    """Django's async test client, each request and its streamed body read on one event
    loop (as a server would), from synchronous tests (whose database they see)."""

    def __init__(self, people=None, role: str = "anonymous") -> None:
        self.client = AsyncClient()
        if role != "anonymous":
            self.client.force_login(people[role])
        self.cookies = self.client.cookies

    def get(self, path: str, **extra):
        return self._do("get", path, extra)

    def post(self, path: str, **extra):
        return self._do("post", path, extra)

    def _do(self, method: str, path: str, extra: dict):
        async def go():
            response = await getattr(self.client, method)(path, **extra)
            if response.streaming:
                response.body = b"".join([piece async for piece in response.streaming_content])
            else:
                response.body = response.content
            return response

        return async_to_sync(go)()


def read(response) -> bytes:
    return response.body


def signed(client, conversation_id, port: int, rest: str = "") -> str:
    response = client.get(f"/preview/{conversation_id}/{port}/{rest}")
    assert response.status_code == 302, read(response)
    return response["Location"]


def isolated(response) -> None:
    assert response["Content-Security-Policy"] == SANDBOX_POLICY
    assert response["Referrer-Policy"] == "no-referrer"
    assert "Set-Cookie" not in response
    assert not response.cookies


@pytest.mark.parametrize("role", ROLES)
def test_who_may_open_a_preview(people, forwarder, upstream, role):
    conversation = shared(people, team=role != "stranger")
    forwarder(conversation.id)
    client = Browser(people, role)
    response = client.get(f"/preview/{conversation.id}/{upstream}/page?x=1")
    isolated(response)
    if role == "anonymous":
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
        return
    if role not in READS:
        assert response.status_code == 404
        return
    assert response.status_code == 302
    location = response["Location"]
    assert location.startswith(f"/preview/{conversation.id}/{upstream}/~")
    assert location.endswith("/page?x=1")
    answer = client.get(location)
    isolated(answer)
    assert answer.status_code == 200
    assert json.loads(read(answer))["path"] == "/page?x=1"


def test_the_signed_address_works_without_the_session(people, forwarder, upstream):
    """A sandboxed page's sub-resources come with no cookie: the address is enough."""
    conversation = shared(people)
    forwarder(conversation.id)
    location = signed(Browser(people, "owner"), conversation.id, upstream, "a/b.js")
    answer = Browser().get(location)
    assert answer.status_code == 200
    assert json.loads(read(answer))["path"] == "/a/b.js"


def test_a_revoked_share_ends_its_signed_address_at_once(people, forwarder, upstream):
    conversation = shared(people, team=False)
    forwarder(conversation.id)
    location = signed(Browser(people, "viewer"), conversation.id, upstream)
    assert Browser().get(location).status_code == 200
    Membership.objects.filter(conversation=conversation, user=people["viewer"]).delete()
    refused = Browser().get(location)
    isolated(refused)
    assert refused.status_code == 404


def test_a_deactivated_reader_loses_the_preview(people, forwarder, upstream):
    conversation = shared(people, team=False)
    forwarder(conversation.id)
    location = signed(Browser(people, "collaborator"), conversation.id, upstream)
    people["collaborator"].is_active = False
    people["collaborator"].save()
    assert Browser().get(location).status_code == 404


def test_the_apps_cookies_never_reach_the_previewed_server(people, forwarder, upstream):
    conversation = shared(people)
    forwarder(conversation.id)
    client = Browser(people, "owner")
    location = signed(client, conversation.id, upstream)
    client.cookies["csrftoken"] = "secret-csrf"
    answer = client.post(location, data=b"hello", content_type="text/plain",
                         HTTP_AUTHORIZATION="Bearer hk_secret")  # fmt: skip
    echoed = json.loads(read(answer))
    sent = {k.lower(): v for k, v in echoed["headers"].items()}
    assert "cookie" not in sent and "authorization" not in sent
    assert echoed["body"] == "hello"
    assert sent["host"] == f"127.0.0.1:{upstream}"


def test_the_previewed_servers_cookies_and_policy_never_reach_the_browser(
    people, forwarder, upstream
):
    conversation = shared(people)
    forwarder(conversation.id)
    client = Browser(people, "owner")
    answer = client.get(signed(client, conversation.id, upstream))
    isolated(answer)
    assert answer["X-Upstream"] == "yes"  # its other headers pass
    assert "sessionid" not in answer.cookies


@pytest.mark.parametrize("tamper", ["flip", "other_port", "other_conversation", "none", "old"])
def test_a_tampered_or_stale_signed_address_is_refused(people, forwarder, upstream, tamper):
    conversation = shared(people)
    other = shared(people)
    forwarder(conversation.id)
    token = preview_tokens.make(people["owner"].pk, conversation.id, upstream)
    port = upstream
    if tamper == "flip":
        token = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    elif tamper == "other_port":
        port = upstream + 1 if upstream < 65535 else upstream - 1
    elif tamper == "other_conversation":
        token = preview_tokens.make(people["owner"].pk, other.id, upstream)
    elif tamper == "none":
        token = "~"
    else:
        token = preview_tokens.make(people["owner"].pk, conversation.id, upstream)
    if tamper == "old":
        later = time.time() + preview_tokens.MAX_AGE + 60
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(time, "time", lambda: later)
            refused = Browser().get(f"/preview/{conversation.id}/{port}/{token}/")
    else:
        refused = Browser().get(f"/preview/{conversation.id}/{port}/{token}/")
    isolated(refused)
    assert refused.status_code == 403


@pytest.mark.parametrize("port", ["0", "65536", "99999999", "-1", "http", "08x"])
def test_ports_out_of_range_are_refused_with_the_policy(people, port):
    conversation = shared(people)
    response = Browser(people, "owner").get(f"/preview/{conversation.id}/{port}/")
    isolated(response)
    assert response.status_code == 404


def test_a_bad_conversation_id_is_refused_with_the_policy(people):
    response = Browser(people, "owner").get("/preview/not-a-uuid/8000/")
    isolated(response)
    assert response.status_code == 404


def test_nothing_listening_is_a_clear_502(people, forwarder, upstream):
    conversation = shared(people)
    forwarder(conversation.id)
    client = Browser(people, "owner")
    free = upstream + 1 if upstream < 65535 else upstream - 1
    answer = client.get(signed(client, conversation.id, free))
    isolated(answer)
    assert answer.status_code == 502
    assert f"Nothing listens on port {free}" in read(answer).decode()


def test_no_terminal_running_is_a_clear_502(people, state, upstream):
    conversation = shared(people)
    client = Browser(people, "owner")
    answer = client.get(signed(client, conversation.id, upstream))
    isolated(answer)
    assert answer.status_code == 502
    assert "terminal is not running" in read(answer).decode()


def test_a_planted_link_in_place_of_the_socket_is_not_followed(people, state, forwarder, upstream):
    """The directory is the sandbox user's to write: a link to another socket of the
    server's is not where its connection goes."""
    conversation = shared(people)
    other = shared(people)
    target = forwarder(other.id)
    os.symlink(target, previews.directory(conversation.id) / "s")
    client = Browser(people, "owner")
    answer = client.get(signed(client, conversation.id, upstream))
    assert answer.status_code == 502


def test_the_forwarders_socket_is_made_open_and_its_jobs_keep_the_usual_umask(people, state):
    """The socket must be open to the server's uid: it is made so by the umask it is made
    under (a chmod of its path would follow a link planted there), and the process's umask
    is put back at once, so the jobs it starts make their files as usual."""
    start, started = forwarders()
    try:
        path = start(shared(people).id)
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o666
        with open(f"/proc/{started[0].pid}/status") as status:
            umask = next(line.split()[1] for line in status if line.startswith("Umask:"))
        ours = os.umask(0)
        os.umask(ours)
        assert int(umask, 8) == ours  # the one it started with (the test's)
    finally:
        started[0].terminate()
        started[0].wait(10)


def test_the_ports_list(people, forwarder, upstream):
    conversation = shared(people, team=False)
    forwarder(conversation.id)
    answer = Browser(people, "viewer").get(f"/api/conversations/{conversation.id}/ports")
    assert answer.status_code == 200
    ports = json.loads(read(answer))["ports"]
    mine = [p for p in ports if p["port"] == upstream]
    url = f"http://testserver/preview/{conversation.id}/{upstream}/"
    assert mine == [{"port": upstream, "url": url}]
    assert (
        Browser(people, "stranger").get(f"/api/conversations/{conversation.id}/ports").status_code
        == 404
    )
    assert Browser().get(f"/api/conversations/{conversation.id}/ports").status_code == 401


def test_the_ports_list_is_empty_without_a_terminal(people, state):
    conversation = shared(people)
    answer = Browser(people, "owner").get(f"/api/conversations/{conversation.id}/ports")
    assert json.loads(read(answer)) == {"ports": []}


def test_a_users_preview_connections_are_bounded(people, settings):
    settings.HARNESS_PREVIEW_CONNECTIONS_PER_USER = 1
    previews.slots.acquire(people["owner"].pk)
    try:
        with pytest.raises(previews.PreviewUnavailable):
            previews.slots.acquire(people["owner"].pk)
        previews.slots.acquire(people["viewer"].pk)  # another user's are their own
        previews.slots.release(people["viewer"].pk)
    finally:
        previews.slots.release(people["owner"].pk)


def test_a_conversations_viewers_cannot_take_every_connection_from_its_drivers(
    people, forwarder, upstream, monkeypatch
):
    """Readers who may not drive share half of what a sandbox's forwarder holds: past it a
    viewer is refused (503), the owner and a collaborator still reach the preview."""
    monkeypatch.setattr(previews, "READERS_SHARE", 1)
    conversation = shared(people)
    forwarder(conversation.id)
    viewer = signed(Browser(people, "viewer"), conversation.id, upstream, "v")
    previews.slots.acquire(people["team"].pk, conversation.id)  # another reader's, held
    try:
        refused = Browser().get(viewer)
        isolated(refused)
        assert refused.status_code == 503 and b"viewers" in read(refused)
        for role in ("owner", "collaborator"):
            answer = Browser().get(signed(Browser(people, role), conversation.id, upstream))
            assert answer.status_code == 200, role
    finally:
        previews.slots.release(people["team"].pk, conversation.id)
    assert Browser().get(viewer).status_code == 200  # given back: the viewer's turn


def test_with_a_preview_origin_previews_are_served_from_it(people, forwarder, upstream, settings):
    # (the test client's requests come to "testserver": here the preview origin's host)
    settings.HARNESS_PREVIEW_ORIGIN = "http://testserver"
    settings.ALLOWED_HOSTS = ["testserver", "app.example.test"]
    conversation = shared(people)
    forwarder(conversation.id)
    app = Client(HTTP_HOST="app.example.test")
    app.force_login(people["owner"])
    response = app.get(f"/preview/{conversation.id}/{upstream}/x")
    isolated(response)
    location = response["Location"]
    assert location.startswith(f"http://testserver/preview/{conversation.id}/{upstream}/~")
    path = location.removeprefix("http://testserver")
    # Asked of the app's own origin, a signed address goes to the preview origin.
    moved = Client(HTTP_HOST="app.example.test").get(path)
    isolated(moved)
    assert moved.status_code == 302 and moved["Location"] == location
    served = Browser().get(path)
    isolated(served)
    assert served.status_code == 200
    assert "X-Frame-Options" not in served  # framed by the app's page, another origin


# -- WebSocket ------------------------------------------------------------------------------
async def echo(connection) -> None:
    async for message in connection:
        await connection.send(f"echo: {message}" if isinstance(message, str) else message[::-1])


def socket_app():
    from agent.web.routing import with_previews

    async def never(scope, receive, send):  # the app's own sockets: not these tests'
        raise AssertionError(scope["path"])

    return with_previews(never)


@pytest.mark.django_db(transaction=True)
async def test_a_websocket_is_relayed_both_ways(people, forwarder):
    from channels.testing import WebsocketCommunicator
    from websockets.asyncio.server import serve

    conversation = await sync_to_async(shared)(people)
    forwarder(conversation.id)
    async with serve(echo, "127.0.0.1", 0, subprotocols=["chat"]) as server:
        port = server.sockets[0].getsockname()[1]
        token = preview_tokens.make(people["viewer"].pk, conversation.id, port)
        path = f"/preview/{conversation.id}/{port}/{token}/ws"
        socket = WebsocketCommunicator(socket_app(), path, subprotocols=["chat"])
        connected, subprotocol = await socket.connect(timeout=20)
        assert connected and subprotocol == "chat"
        await socket.send_to(text_data="hello")
        assert await socket.receive_from(timeout=20) == "echo: hello"
        await socket.send_to(bytes_data=b"abc")
        assert await socket.receive_from(timeout=20) == b"cba"
        await socket.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("who", ["tampered", "stranger", "public"])
async def test_a_websocket_without_a_valid_signed_address_is_refused(people, forwarder, who):
    from channels.testing import WebsocketCommunicator
    from websockets.asyncio.server import serve

    conversation = await sync_to_async(shared)(people, team=False)
    forwarder(conversation.id)
    async with serve(echo, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        user = people["stranger" if who == "stranger" else "owner"]
        token = preview_tokens.make(user.pk, conversation.id, port)
        if who == "tampered":
            token = token[:-1] + ("A" if token[-1] != "A" else "B")
        rest = "ws" if who == "public" else f"{token}/ws"
        socket = WebsocketCommunicator(socket_app(), f"/preview/{conversation.id}/{port}/{rest}")
        connected, _ = await socket.connect(timeout=20)
        assert not connected
