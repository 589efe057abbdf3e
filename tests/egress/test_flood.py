"""A sandbox flooding the egress proxy with connections it knows are refused: each one
costs the server's process database work on its one thread for synchronous calls (the
rules, the day's bytes, a log row and the log's trim), shared with every other user's
runs there, and pushes other users' rows out of the bounded Egress log. Past a pace, a
connection is refused at the door: answered, counted in /metrics, and logged as one row
now and then rather than one each."""

from __future__ import annotations

import asyncio
import time

import pytest

from agent.egress import proxy as egress_proxy
from agent.models import EgressLog
from agent.server import metrics

pytestmark = pytest.mark.django_db(transaction=True)

FLOOD = 300


async def test_a_flood_of_refused_connections_writes_a_bounded_number_of_rows(
    ada, allow, proxied, monkeypatch
):
    monkeypatch.setattr(egress_proxy, "PACE", 2.0)  # (slow: the test's machine is shared)
    monkeypatch.setattr(egress_proxy, "PACE_BURST", 20.0)
    allow("")
    proxy = await proxied(ada)
    started = time.monotonic()
    refused_before = metrics.EGRESS_CONNECTIONS.values.get("refused", 0)
    request = b"CONNECT nowhere.example.com:443 HTTP/1.1\r\n\r\n"
    answers = []
    for _ in range(FLOOD // 25):  # as fast as the sandbox may, 25 at a time
        answers += await asyncio.gather(*(proxy.ask(request) for _ in range(25)))
    assert all(answer.startswith(b"HTTP/1.1 403") for answer in answers)
    elapsed = time.monotonic() - started
    rows = await EgressLog.objects.acount()
    most = egress_proxy.PACE_BURST + egress_proxy.PACE * elapsed
    assert rows <= most + elapsed / egress_proxy.FLOOD_ROW_SECONDS + 1, (rows, elapsed)
    assert metrics.EGRESS_CONNECTIONS.values["refused"] - refused_before == FLOOD
    paced = [a for a in answers if b"a second" in a]
    assert paced, "the flood was never paced"
    assert await EgressLog.objects.filter(reason__contains="a second").aexists()


async def test_the_pace_refills(ada, allow, proxied, origin, monkeypatch):
    """A sandbox that paused gets its connections again."""
    monkeypatch.setattr(egress_proxy, "PACE", 50.0)
    allow(f"127.0.0.1:{origin}")
    proxy = await proxied(ada)
    get = f"GET http://127.0.0.1:{origin}/ HTTP/1.1\r\nHost: 127.0.0.1:{origin}\r\n\r\n".encode()
    for _ in range(int(egress_proxy.PACE_BURST) + 5):
        await proxy.ask(get)
    await asyncio.sleep(1.0)  # 50 tokens back
    answer = await proxy.ask(get)
    assert answer.startswith(b"HTTP/1.0 200"), answer
