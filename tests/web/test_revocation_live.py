"""Against a live Daphne server on a Redis channel layer, with the credential withdrawn from
another process (a management shell): the revocation crosses processes through Redis and
ends the open event stream or socket within seconds. Heartbeats are a minute apart, so the
message, not a heartbeat's re-check, is what ends them. Also: a page on another port of the
same host cannot open a socket."""

from __future__ import annotations

import asyncio
import http.cookiejar
import re
import time
import urllib.parse
import urllib.request

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from testkit.api_client import Api, read_until
from testkit.live import LiveServer, free_port
from tests.services import require_redis

pytestmark = pytest.mark.services

CLOSE_WITHIN = 5.0


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    # A Redis database of its own: channel groups (token.1, user.1) of other test servers
    # on the same Redis must not hear these revocations.
    redis_url = re.sub(r"/\d*$", "", require_redis().rstrip("/")) + "/11"
    server = LiveServer(tmp_path_factory.mktemp("revocation"), REDIS_URL=redis_url,
                        HARNESS_SSE_HEARTBEAT="60", HARNESS_BASH="off")  # fmt: skip
    server.start()
    server.create_users("ivy", "jay")
    yield server
    server.stop()


def is_final(item) -> bool:
    return item[0] == "event" and item[2]["type"] == "status" and item[2]["state"] == "idle"


def stream_ends_within(stream, seconds: float) -> bool:
    started = time.monotonic()
    try:
        for _ in stream:
            pass
    except TimeoutError:
        return False
    return time.monotonic() - started < seconds


def test_a_token_revoked_in_another_process_ends_its_open_stream(live):
    token = live.manage("create_api_token", "ivy", "--name", "doomed").strip()
    api = Api(live.url, token)
    status, created = api.call("POST", "/api/conversations", {})
    assert status == 201
    # A stored answer first (the offline demo model's): Daphne sends the response's head
    # with its first bytes, and the first heartbeat is a minute away.
    assert (
        api.call("POST", f"/api/conversations/{created['id']}/prompt", {"content": "hi"})[0] == 202
    )
    response, stream = api.events(created["id"], timeout=CLOSE_WITHIN * 2)
    assert response.status == 200
    read_until(stream, is_final)
    live.manage("shell", "-c", "from agent.models import ApiToken; "
                "from agent.web.api_tokens import revoke_tokens; "
                "revoke_tokens(ApiToken.objects.filter(name='doomed'))")  # fmt: skip
    assert stream_ends_within(stream, CLOSE_WITHIN)
    assert api.call("GET", "/api/conversations")[0] == 401


def sign_in(live: LiveServer, username: str, password: str) -> str:
    """The session cookie from the real sign-in form."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(f"{live.url}/accounts/login/").read().decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)[1]
    form = urllib.parse.urlencode({"username": username, "password": password,
                                   "csrfmiddlewaretoken": csrf}).encode()  # fmt: skip
    opener.open(f"{live.url}/accounts/login/", form)
    return next(c.value for c in jar if c.name == "sessionid")


def home_conversation(live: LiveServer, session: str) -> str:
    request = urllib.request.Request(f"{live.url}/", headers={"Cookie": f"sessionid={session}"})
    with urllib.request.urlopen(request) as response:
        return response.url.rstrip("/").rsplit("/", 1)[1]


async def test_a_password_changed_in_another_process_closes_the_open_socket(live):
    session = sign_in(live, "ivy", "pw-ivy-1234")
    conversation = home_conversation(live, session)
    ws_url = f"{live.url.replace('http://', 'ws://')}/ws/c/{conversation}/"
    async with connect(ws_url, origin=live.url,
                       additional_headers={"Cookie": f"sessionid={session}"}) as ws:  # fmt: skip
        await asyncio.to_thread(
            live.manage, "shell", "-c", "from agent.models import User; u = User.objects.get("
            "username='ivy'); u.set_password('pw-ivy-changed-1'); u.save()",
        )  # fmt: skip
        received = ""
        with pytest.raises(ConnectionClosed):
            async with asyncio.timeout(CLOSE_WITHIN):
                while True:
                    received += await ws.recv()
        assert "signed_out" in received


@pytest.mark.parametrize("origin", ["http://127.0.0.1:{other}", "https://127.0.0.1:{port}",
                                    "http://localhost:{port}"])  # fmt: skip
async def test_a_page_on_another_origin_of_the_host_cannot_open_a_socket(live, origin):
    session = sign_in(live, "jay", "pw-jay-1234")
    conversation = home_conversation(live, session)
    ws_url = f"{live.url.replace('http://', 'ws://')}/ws/c/{conversation}/"
    page = origin.format(other=free_port(), port=live.port)
    with pytest.raises(InvalidStatus) as refused:
        async with connect(ws_url, origin=page,
                           additional_headers={"Cookie": f"sessionid={session}"}):  # fmt: skip
            pass
    assert refused.value.response.status_code == 403
    async with connect(ws_url, origin=live.url,  # the page's own origin: accepted
                       additional_headers={"Cookie": f"sessionid={session}"}):  # fmt: skip
        pass
