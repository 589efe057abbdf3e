"""What the model gateway's tests share: the deployment's key and the calls' helpers."""

from __future__ import annotations

import asyncio
import json
import os

import aiohttp

from agent.core.events import UsageEvent
from testkit.model_server import text_reply

DEPLOYMENT_KEY = "sk-the-deployments-own-key"


def socket_of(gateway) -> str:
    return os.path.join(gateway._directory, "s")


def metered_into(gateway) -> list[UsageEvent]:
    usage: list[UsageEvent] = []
    gateway.begin_run("run-1", on_usage=usage.append, guard=None)  # (free: no budget)
    return usage


async def hang_up_after_first_bytes(gateway, upstream, path: str, body: dict, headers=None) -> list:
    """A CLI that asks for a slow streamed answer and goes away after its first bytes: returns
    what was metered for the call (waiting for the gateway to meter it)."""
    usage = metered_into(gateway)
    slow = text_reply("a long answer " * 20)
    slow.delay = 0.05
    upstream.enqueue(slow)
    connector = aiohttp.UnixConnector(path=socket_of(gateway))
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(f"http://gw{path}", data=json.dumps(body), headers=headers) as response,
    ):
        await response.content.readany()  # the first bytes, then it goes away
    for _ in range(200):
        if usage:
            break
        await asyncio.sleep(0.05)
    return usage
