"""``HARNESS_EGRESS=proxy`` on a live root server (its broker starts every sandbox as the
user's uid): the built-in agent's bash, the real CLI agents and the Terminal
panel's shell reach an origin a rule names through the proxy, each connection logged with
its user and conversation; the CLI's model traffic still goes through the gateway."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from websockets.asyncio.client import connect

from testkit.api_client import Api
from testkit.model_server import text_reply, tool_reply
from tests.cli_agents import cli_live_server
from tests.web.test_cli_agents_live import TOOL_NAMES, prompt_and_read, script
from tests.web.test_revocation_live import home_conversation, sign_in
from tests.web.test_terminal_live import Page, prompted

pytestmark = pytest.mark.slow

BODY = "hello from the allowed origin"


class _Origin(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        body = BODY.encode() + b"\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _serve(address: str):
    server = ThreadingHTTPServer((address, 0), _Origin)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def origin():
    yield from _serve("127.0.0.1")


@pytest.fixture(scope="module")
def elsewhere():
    """An origin at another loopback address: a CLI's NO_PROXY names 127.0.0.1 (inside its
    sandbox, that is the sandbox itself: its model gateway's port)."""
    yield from _serve("127.0.0.2")


@pytest.fixture(scope="module")
def live(tmp_path_factory, model, origin, elsewhere):
    rules = f"127.0.0.1:{origin}, 127.0.0.2:{elsewhere}"
    with cli_live_server(tmp_path_factory.mktemp("egress"), model.url, "the-deployments-key",
                         HARNESS_RUNS_PER_MINUTE="100", HARNESS_EGRESS="proxy",
                         HARNESS_EGRESS_ALLOW=rules) as server:  # fmt: skip
        yield server


@pytest.fixture(scope="module")
def alice(live):
    return Api(live.url, live.manage("create_api_token", "alice").strip())


def logged(live, conversation: str) -> list[list]:
    """The Egress log's rows of a conversation: [username, port, allowed]."""
    code = (
        "import json; from agent.models import EgressLog; print(json.dumps([[r.user.username, "
        f"r.port, r.allowed] for r in EgressLog.objects.filter(conversation_id='{conversation}')"
        ".select_related('user')]))"
    )
    return json.loads(live.manage("shell", "-c", code).strip().splitlines()[-1])


def curl(port: int, host: str = "127.0.0.1") -> str:
    return f"curl -sS --max-time 20 http://{host}:{port}/"


def test_bash_through_the_broker_reaches_the_named_origin_and_nothing_else(
    live, alice, fresh, origin
):
    _, conversation = alice.call("POST", "/api/conversations", {})
    command = f"{curl(origin)}; {curl(origin + 1)}; {curl(origin)} --noproxy '*'; echo $HTTPS_PROXY"
    fresh.enqueue(tool_reply(("bash", {"command": command})), text_reply("done"))
    events = prompt_and_read(alice, conversation["id"], "go")
    (result,) = [e for e in events if e["type"] == "tool_result"]
    output = json.loads(result["result"])["output"]
    assert output.count(BODY) == 1, output  # through the proxy; not around it
    assert f"egress refused: 127.0.0.1:{origin + 1}: no egress rule admits" in output, output
    assert "http://127.0.0.1:3128" in output
    assert sorted(logged(live, conversation["id"])) == [
        ["alice", origin, True],
        ["alice", origin + 1, False],
    ]


# Each CLI's shell tool and the name of its command argument.
SHELLS = {**{agent: (tool, "command") for agent, tool in TOOL_NAMES.items()},
          "codex": ("exec_command", "cmd")}  # fmt: skip


@pytest.mark.parametrize("agent", sorted(SHELLS))
def test_a_cli_agents_commands_go_through_the_proxy_and_its_model_through_the_gateway(
    live, alice, model, elsewhere, agent
):
    status, body = alice.call("POST", "/api/conversations", {"agent": agent})
    assert status == 201
    command = f"{curl(elsewhere, '127.0.0.2')}; echo no_proxy=$NO_PROXY"
    tool, argument = SHELLS[agent]
    script(model, tool_reply((tool, {argument: command}), text="Fetching."),
           text_reply("Fetched."))  # fmt: skip
    events = prompt_and_read(alice, body["id"], "fetch it")
    result = next(e for e in events if e["type"] == "tool_result")
    assert BODY in result["result"] and "no_proxy=127.0.0.1,localhost" in result["result"]
    assert [e["content"] for e in events if e["type"] == "text"] == ["Fetching.", "Fetched."]
    # Some CLIs reach for their own hosts as well (OpenCode and Pi look for models and
    # updates on 443): refused, as no rule names them, and logged as the user's.
    rows = logged(live, body["id"])
    assert ["alice", elsewhere, True] in rows
    assert all(user == "alice" and (port == elsewhere or not ok) for user, port, ok in rows)


async def test_the_terminals_shell_reaches_the_named_origin_through_the_proxy(live, origin):
    session = sign_in(live, "alice", "pw-alice-1234")
    conversation = home_conversation(live, session)
    url = f"{live.url.replace('http://', 'ws://')}/ws/c/{conversation}/"
    async with connect(url, origin=live.url, max_size=None,
                       additional_headers={"Cookie": f"sessionid={session}"}) as ws:  # fmt: skip
        page = Page(ws)
        await page.send({"action": "terminal_resize", "cols": 120, "rows": 30})
        await page.until(prompted)
        await page.typed(f"{curl(origin)}\r")
        await page.until(lambda s: BODY in s)
    # The row is written as the connection ends, which may be just after curl printed the
    # body. (The home conversation may be the CLI test's: its rows are there too.)
    deadline = time.monotonic() + 15
    while ["alice", origin, True] not in (rows := logged(live, conversation)):
        assert time.monotonic() < deadline, rows
        await asyncio.sleep(0.2)
