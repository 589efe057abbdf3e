"""A preview end to end on a live root server: a web server started in the Terminal
panel's shell (the owner's sandbox, its own network namespace) is listed by the ports
API and served, through the server, to the owner (the public address redirecting to the
signed one) with the sandboxing policy; refused to another user and to the anonymous.
The shell keeps its job control (Ctrl-C) with the forwarder beside it. A server the agent
starts with bash's background is previewed the same way."""

from __future__ import annotations

import http.client
import json
import time
from urllib.parse import urlsplit

import pytest

from agent.web.previews import SANDBOX_POLICY
from testkit.api_client import Api
from tests.web.test_cli_agents_live import prompt_and_read
from tests.web.test_revocation_live import sign_in
from tests.web.test_terminal_live import RUNNING, WAIT, live, ready_shell  # noqa: F401

pytestmark = pytest.mark.slow

PORT = 8765
AGENT_PORT = 8766


def get(server, path: str, session: str | None = None):
    netloc = urlsplit(server.url).netloc
    connection = http.client.HTTPConnection(netloc, timeout=WAIT)
    headers = {"Cookie": f"sessionid={session}"} if session else {}
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response, body


def listed(server, session: str, conversation: str) -> list[int]:
    response, body = get(server, f"/api/conversations/{conversation}/ports", session)
    assert response.status == 200, body
    return [p["port"] for p in json.loads(body)["ports"]]


async def test_a_server_in_the_terminal_is_previewed_to_its_readers_only(live):  # noqa: F811
    async with ready_shell(live, "tess") as (page, session, conversation):
        await page.typed("echo preview-body > index.html\r")
        await page.typed(f"python3 -m http.server {PORT} --bind 127.0.0.1 &\r")
        deadline = time.monotonic() + WAIT
        while PORT not in listed(live, session, conversation):  # its socket, as it appears
            assert time.monotonic() < deadline, "the server never listed its port"
            time.sleep(0.1)
        response, _ = get(live, f"/preview/{conversation}/{PORT}/index.html", session)
        assert response.status == 302
        signed = response.getheader("Location")
        answer, body = get(live, signed)  # no cookie: the address is the credential
        assert answer.status == 200, body
        assert body == b"preview-body\n"
        assert answer.getheader("Content-Security-Policy") == SANDBOX_POLICY
        assert answer.getheader("Referrer-Policy") == "no-referrer"
        assert answer.getheader("Set-Cookie") is None
        # Job control is the shell's as before: Ctrl-C ends the foreground program.
        await page.typed(RUNNING)
        await page.until(lambda s: "sleeping" in s)
        await page.typed("\x03")
        await page.typed("echo after-$((1+1))\r")
        await page.until(lambda s: "after-2" in s.split("echo after-")[-1])
    other = sign_in(live, "eve", "pw-eve-1234")
    response, _ = get(live, f"/preview/{conversation}/{PORT}/index.html", other)
    assert response.status == 404
    assert response.getheader("Content-Security-Policy") == SANDBOX_POLICY
    response, _ = get(live, f"/preview/{conversation}/{PORT}/index.html")
    assert response.status == 302 and "/accounts/login/" in response.getheader("Location")
    response, _ = get(live, f"/api/conversations/{conversation}/ports", other)
    assert response.status == 404


def test_a_server_the_agent_starts_in_the_background_is_previewed(live):  # noqa: F811
    """The offline demo's ``serve``: bash's background call starts the server in the
    conversation's terminal sandbox, says where it listens, and it keeps serving."""
    vic = Api(live.url, live.manage("create_api_token", "vic").strip())
    _, conversation = vic.call("POST", "/api/conversations", {})
    command = f"echo agent-$((6*7)); exec python3 -m http.server {AGENT_PORT} --bind 127.0.0.1"
    events = prompt_and_read(vic, conversation["id"], f"serve {command}")
    (result,) = [e for e in events if e["type"] == "tool_result"]
    payload = json.loads(result["result"])
    assert payload["running"] and "agent-42" in payload["output"], payload
    preview = f"/preview/{conversation['id']}/{AGENT_PORT}/"
    assert payload["ports"] == [{"port": AGENT_PORT, "preview": preview}]
    session = sign_in(live, "vic", "pw-vic-1234")
    assert AGENT_PORT in listed(live, session, conversation["id"])
    response, _ = get(live, preview, session)
    assert response.status == 302
    answer, body = get(live, response.getheader("Location"))
    assert answer.status == 200 and b"Directory listing" in body, body
    assert answer.getheader("Content-Security-Policy") == SANDBOX_POLICY
