"""Attached images in the agent loop, through the real SDK against the
test model server: the loader's data goes out as base64 blocks while the history keeps
references; an image the API refused, steered in beside tool results, is named instead in
every later request (else each would fail the same way)."""

from __future__ import annotations

import asyncio

from agent.core.config import Config
from agent.core.images import ImageRef
from agent.core.loop import AgentLoop
from testkit.model_server import HttpError, text_reply, tool_reply
from tests.core.test_queues import GateTool

SHOT = ImageRef("ab" * 32, "image/png", "uploads/shot.png")


def loader_of(data: dict[str, str], calls: list):
    async def load(shas):
        calls.append(list(shas))
        return {sha: data[sha] for sha in shas if sha in data}

    return load


def image_sources(body) -> list[dict]:
    return [block["source"] for message in body["messages"] if isinstance(message["content"], list)
            for block in message["content"] if block.get("type") == "image"]  # fmt: skip


def texts(body) -> list[str]:
    return [block["text"] for message in body["messages"] if isinstance(message["content"], list)
            for block in message["content"] if block.get("type") == "text"]  # fmt: skip


async def test_the_loaders_data_is_sent_and_the_history_keeps_a_reference(provider,
                                                                         model_server):  # fmt: skip
    calls: list = []
    events: list = []
    loop = AgentLoop(provider, [], Config(api_key="test-key"), events.append,
                     images=loader_of({SHOT.sha256: "QUJD"}, calls))  # fmt: skip
    model_server.enqueue(text_reply("a chart"), text_reply("still a chart"))
    await loop.prompt("what is it?", images=(SHOT,))
    await loop.prompt("and now?")
    first, second = model_server.bodies
    assert image_sources(first) == [{"type": "base64", "media_type": "image/png", "data": "QUJD"}]
    assert image_sources(second) == image_sources(first)  # every later request too
    assert calls == [[SHOT.sha256]]  # loaded once per loop
    assert loop.messages[0]["content"][0]["source"]["type"] == "harness_image"
    user = next(e for e in events if e.type == "user")
    assert user.images == [SHOT.to_dict()]


async def test_an_image_the_api_refused_is_named_in_every_later_request(provider,
                                                                      model_server):  # fmt: skip
    gate = GateTool()
    loop = AgentLoop(provider, [gate], Config(api_key="test-key"), lambda e: None,
                     images=loader_of({SHOT.sha256: "QUJD"}, []))  # fmt: skip
    model_server.enqueue(
        tool_reply(("gate", {})),
        HttpError(400, "invalid_request_error", "image exceeds 5 MB maximum"),
        text_reply("fine"),
    )  # fmt: skip
    task = asyncio.create_task(loop.prompt("run the gate"))
    await asyncio.wait_for(gate.started.wait(), 10)
    loop.queue("look at this too", "steer", images=(SHOT,))  # merged with the tool's result
    gate.release.set()
    result = await asyncio.wait_for(task, 20)
    assert result.state == "error"
    assert image_sources(model_server.bodies[1])  # the refused request carried it
    await loop.prompt("text only now")
    last = model_server.bodies[-1]
    assert image_sources(last) == []
    assert "[image uploads/shot.png: not sent, the request with it failed]" in texts(last)
