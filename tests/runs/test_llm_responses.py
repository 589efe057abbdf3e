"""The gateway's Responses API for Codex (docs/API.md, "/llm/openai/v1/responses"): over a
CLI session's socket, raw SSE as Codex reads it, translated to the scripted Messages API
upstream and back, with the same credential, metering and refusals as ``/llm/anthropic``."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from django.test import AsyncClient

from agent.core.loop import CallRefused
from agent.core.model.wire import SSEParser
from agent.runs import llm_gateway
from agent.runs.llm_gateway import MAX_BODY
from testkit.model_server import HttpError, text_reply, tool_reply
from tests.runs.gateway_calls import (
    DEPLOYMENT_KEY,
    hang_up_after_first_bytes,
    metered_into,
    socket_of,
)

PATH = "/llm/openai/v1/responses"
TOOLS = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]


def request(**fields) -> dict:
    return {"model": "claude-haiku-4-5", "stream": True, "store": False, "tools": TOOLS,
            "input": [{"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": "hi"}]}], **fields}  # fmt: skip


async def post(gateway, body, path=PATH, method="POST", raw: bytes | None = None):
    """One call over the session's socket, as Codex makes it (its key: the placeholder)."""
    connector = aiohttp.UnixConnector(path=socket_of(gateway))
    async with aiohttp.ClientSession(connector=connector) as session:
        headers = {"authorization": f"Bearer {llm_gateway.PLACEHOLDER_KEY}",
                   "content-type": "application/json", "accept": "text/event-stream"}  # fmt: skip
        data = raw if raw is not None else json.dumps(body).encode()
        async with session.request(method, f"http://gw{path}", data=data,
                                   headers=headers) as response:  # fmt: skip
            return response.status, dict(response.headers), await response.read()


def sse_events(body: bytes) -> list[tuple[str, dict]]:
    return [(name, json.loads(data)) for name, data in SSEParser().feed(body)]


async def test_a_streamed_call_is_translated_both_ways_and_metered_once(gateway, upstream):
    usage = metered_into(gateway)
    upstream.enqueue(tool_reply(("exec_command", {"cmd": "ls"}), text="Looking."))
    status, headers, body = await post(gateway, request(instructions="Be brief."))
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(body)
    assert all(name == data["type"] for name, data in events)
    kinds = [name for name, _ in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    done = [data["item"] for name, data in events if name == "response.output_item.done"]
    assert [i["type"] for i in done] == ["message", "function_call"]
    assert json.loads(done[1]["arguments"]) == {"cmd": "ls"}
    assert events[-1][1]["response"]["usage"]["output_tokens"] == 20
    # Upstream: the Messages API, with the deployment's key; Codex's bearer stayed here.
    sent = upstream.requests[0]
    assert sent["path"] == "/v1/messages"
    assert sent["body"]["system"] == "Be brief." and sent["body"]["stream"] is True
    assert sent["body"]["tools"][0]["name"] == "exec_command"
    lowered = {k.lower(): v for k, v in sent["headers"].items()}
    assert lowered["x-api-key"] == DEPLOYMENT_KEY and "authorization" not in lowered
    assert [(u.input_tokens, u.output_tokens) for u in usage] == [(10, 20)]
    assert usage[0].cost_usd > 0


async def test_a_plain_call_gets_the_final_response_object(gateway, upstream):
    usage = metered_into(gateway)
    upstream.enqueue(text_reply("whole answer"))
    status, _, body = await post(gateway, request(stream=False))
    answer = json.loads(body)
    assert status == 200 and answer["object"] == "response" and answer["status"] == "completed"
    assert answer["output"][0]["content"][0]["text"] == "whole answer"
    assert len(usage) == 1


@pytest.mark.parametrize(("fields", "phrase"), [
    ({"tools": [{"type": "web_search"}]}, "'web_search' has no equivalent"),
    ({"previous_response_id": "resp_123"}, "previous_response_id"),
    ({"input": [{"type": "local_shell_call", "call_id": "c"}]}, "'local_shell_call'"),
])  # fmt: skip
async def test_what_has_no_equivalent_is_a_400_naming_it_and_nothing_goes_upstream(
    gateway, upstream, fields, phrase
):
    usage = metered_into(gateway)
    status, _, body = await post(gateway, request(**fields))
    error = json.loads(body)["error"]
    assert status == 400 and error["type"] == "invalid_request_error"
    assert phrase in error["message"]
    assert upstream.requests == [] and usage == []


async def test_refusals_come_in_openais_shape(gateway, upstream):
    status, _, body = await post(gateway, request())  # no run going on
    assert status == 403 and "No run" in json.loads(body)["error"]["message"]
    metered_into(gateway)
    for path, method, expected in ((PATH, "GET", 405), ("/llm/openai/v1/files", "POST", 404),
                                   ("/llm/openai/v1/responses/compact", "POST", 404)):  # fmt: skip
        status, _, body = await post(gateway, request(), path=path, method=method)
        assert status == expected and set(json.loads(body)["error"]) >= {"type", "message"}
    status, _, body = await post(gateway, None, raw=b"{not json")
    assert status == 400 and "not JSON" in json.loads(body)["error"]["message"]
    status, _, body = await post(gateway, None, raw=b" " * (MAX_BODY + 1))
    assert status == 413 and json.loads(body)["error"]["type"] == "request_too_large"
    assert upstream.requests == []


async def test_a_spent_budget_is_a_403_before_anything_goes_upstream(gateway, upstream):
    async def budget_spent():
        raise CallRefused("budget_exceeded", "This month's budget of $5.00 is spent.")

    gateway.begin_run("run-1", on_usage=lambda usage: None, guard=budget_spent)
    status, _, body = await post(gateway, request())
    assert status == 403 and "budget of $5.00" in json.loads(body)["error"]["message"]
    assert upstream.requests == []


async def test_an_upstream_refusal_keeps_its_status_in_openais_words(gateway, upstream):
    usage = metered_into(gateway)
    upstream.enqueue(HttpError(429, "rate_limit_error", "Slow down", {"retry-after": "7"}))
    status, headers, body = await post(gateway, request())
    error = json.loads(body)["error"]
    assert status == 429 and headers.get("Retry-After") == "7"
    assert (error["code"], error["message"]) == ("rate_limit_exceeded", "Slow down")
    assert usage == []


async def test_codex_hanging_up_mid_answer_still_pays_for_what_was_asked(gateway, upstream):
    usage = await hang_up_after_first_bytes(gateway, upstream, PATH, request())
    assert [u.input_tokens for u in usage] == [10]


async def test_the_http_face_answers_nobody_even_during_a_run(gateway, upstream):
    metered_into(gateway)
    headers = {"authorization": f"Bearer {DEPLOYMENT_KEY}"}
    refused = await AsyncClient().post(PATH, json.dumps(request()), headers=headers,
                                       content_type="application/json")  # fmt: skip
    assert refused.status_code == 401
    body = b"".join([chunk async for chunk in refused.streaming_content])
    assert json.loads(body)["error"]["type"] == "authentication_error"
    assert upstream.requests == []


async def test_concurrent_calls_get_their_own_answers_each_metered_once(gateway, upstream):
    """Codex's sub-agents call at the same time: the translations share nothing."""
    usage = metered_into(gateway)
    texts = [f"answer number {n} " * 5 for n in range(6)]
    for text in texts:
        upstream.enqueue(text_reply(text))
    answers = await asyncio.gather(*(post(gateway, request()) for _ in texts))
    got = []
    for status, _, body in answers:
        events = sse_events(body)
        assert status == 200 and events[-1][0] == "response.completed"
        deltas = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
        done = [d["item"] for n, d in events if n == "response.output_item.done"]
        assert done[0]["content"][0]["text"] == deltas
        assert len({d["response"]["id"] for n, d in events if "response" in d}) == 1
        got.append(deltas)
    assert sorted(got) == sorted(texts)
    assert len(usage) == len(texts)
