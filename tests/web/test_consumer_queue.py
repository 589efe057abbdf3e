"""Queues over the page's WebSocket, in the page, across run managers and after a crash
(docs/API.md). A bash call waiting for a file holds a tool running until the test opens
it; the real SDK talks to the test model server."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.utils import timezone

from agent.core.events import QueuedEvent, UserEvent
from agent.models import Conversation, Event
from agent.runs.claim import RunRefused
from agent.runs.manager import RunManager, runs
from agent.runs.recovery import expired, interrupt
from testkit.model_server import echo_fallback, text_reply, tool_reply
from tests.web.test_consumer import collect_until_idle, connected, make_user

pytestmark = pytest.mark.django_db(transaction=True)

QUEUED_ID = re.compile(r'data-queued="([0-9a-f]+)"')


@pytest.fixture
def agent_settings(settings, model_server, tmp_path):
    settings.ANTHROPIC_API_KEY = "test-key"
    settings.ANTHROPIC_BASE_URL = model_server.url
    settings.HARNESS_WORKSPACES = tmp_path / "workspaces"
    settings.HARNESS_BASH = "unsafe"
    model_server.fallback = echo_fallback
    return settings


@pytest.fixture
def alice(agent_settings):
    user = make_user("alice")
    return user, Conversation.objects.create(owner=user, model="claude-haiku-4-5")


class Gate:
    def __init__(self, settings, user):
        self.path = Path(settings.HARNESS_WORKSPACES) / str(user.id) / f"gate-{uuid.uuid4().hex}"
        self.call = ("bash", {"command": f"while [ ! -e {self.path.name} ]; do sleep 0.02; done"})

    def open(self):
        self.path.write_text("")


async def receive_until(ws, *needles: str, timeout: float = 10.0) -> str:
    html = ""
    async with asyncio.timeout(timeout):
        while not all(needle in html for needle in needles):
            html += await ws.receive_from(timeout=timeout)
    return html


def page(user, conversation, path: str = "") -> str:
    client = Client()
    client.force_login(user)
    return client.get(f"/c/{conversation.id}/{path}").content.decode()


async def test_websocket_queues_and_unqueues_and_a_reload_shows_the_queue(
    alice, model_server, agent_settings
):
    user, conversation = alice
    gate = Gate(agent_settings, user)
    model_server.enqueue(tool_reply(gate.call), text_reply("first done"), text_reply("kept done"))
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "go"}))
    await receive_until(ws, 'data-state="running_tool"')
    await ws.send_to(text_data=json.dumps({"content": "drop me", "mode": "follow_up"}))
    html = await receive_until(ws, 'data-outcome="accepted"', "data-queued=")
    dropped = QUEUED_ID.findall(html)[-1]
    assert 'id="queue"' in html and "drop me" in html
    await ws.send_to(text_data=json.dumps({"content": "keep me", "mode": "steer",
                                           "HEADERS": {}}))  # fmt: skip
    html = await receive_until(ws, 'data-outcome="accepted"', "keep me</span>")
    kept = [qid for qid in QUEUED_ID.findall(html) if qid != dropped][-1]
    await ws.send_to(text_data=json.dumps({"action": "unqueue", "id": dropped, "HEADERS": {}}))
    html = await receive_until(ws, 'id="queue"')
    assert f'data-queued="{dropped}"' not in html and f'data-queued="{kept}"' in html
    # A reload while it runs shows the queue (folded from the event log).
    shown = await sync_to_async(page)(user, conversation)
    assert f'data-queued="{kept}"' in shown and f'data-queued="{dropped}"' not in shown
    assert 'data-mode="steer"' in shown and "keep me" in shown
    # Removing it again: no longer queued, said beside the composer; nothing else changes.
    await ws.send_to(text_data=json.dumps({"action": "unqueue", "id": dropped}))
    assert "not_queued" in await ws.receive_from()
    await ws.send_to(text_data=json.dumps({"content": "x", "mode": "sideways"}))
    assert "bad_mode" in await ws.receive_from()
    await ws.send_to(text_data=json.dumps({"action": "unqueue", "id": 7}))
    assert 'data-code="bad_frame"' in await ws.receive_from()
    gate.open()
    html = await collect_until_idle(ws)
    await runs.wait(conversation.id)
    assert 'data-part="user"' in html and 'data-mode="steer"' in html and "keep me" in html
    stored = await sync_to_async(list)(
        Event.objects.filter(conversation=conversation).order_by("seq").values_list(
            "payload", flat=True)
    )  # fmt: skip
    users = [(e["content"], e.get("mode")) for e in stored if e["type"] == "user"]
    assert users == [("go", None), ("keep me", "steer")]
    assert [e["content"] for e in stored if e["type"] == "queued"] == ["drop me", "keep me"]
    assert [e["type"] for e in stored].count("status") >= 2
    assert [e["state"] for e in stored if e["type"] == "status"][-1] == "idle"
    assert [e for e in stored if e["type"] == "status" and e["state"] in ("idle", "error")] == [
        stored[-1]]  # fmt: skip
    # After the run the page shows an empty queue and the steer's user part.
    shown = await sync_to_async(page)(user, conversation)
    assert "data-queued" not in shown and 'data-mode="steer"' in shown
    exported = await sync_to_async(page)(user, conversation, "export.md")
    assert "## User (steering) · #" in exported and "keep me" in exported
    # Typed prompts join the prompt history, queued ones too.
    history = await sync_to_async(lambda: type(user).objects.get(id=user.id).prompt_history)()
    assert history == ["go", "drop me", "keep me"]
    await ws.disconnect()


async def test_a_cancel_sent_over_the_socket_gives_the_queued_text_back(
    alice, model_server, agent_settings
):
    user, conversation = alice
    gate = Gate(agent_settings, user)
    model_server.enqueue(tool_reply(gate.call))
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "go"}))
    await receive_until(ws, 'data-state="running_tool"')
    await ws.send_to(text_data=json.dumps({"content": "come back", "mode": "follow_up"}))
    await receive_until(ws, 'data-outcome="accepted"', "data-queued=")
    await ws.send_to(text_data=json.dumps({"action": "cancel"}))
    html = await collect_until_idle(ws)
    gate.open()
    await runs.wait(conversation.id)
    assert 'data-code="not_sent"' in html and "data-restore=" in html and "come back" in html
    assert re.search(r'<ul id="queue"[^>]*hidden', html)
    # A reload still shows it as not sent, with a button that sends it.
    shown = await sync_to_async(page)(user, conversation)
    assert 'data-code="not_sent"' in shown and 'value="come back"' in shown


async def test_a_queue_request_reaches_the_run_through_the_control_group(
    alice, model_server, agent_settings
):
    """Another process (here: a second run manager, with no run of its own) queues and
    unqueues on the run through the channel layer, as a request answered on its channel."""
    user, conversation = alice
    gate = Gate(agent_settings, user)
    model_server.enqueue(tool_reply(gate.call), text_reply("done"), text_reply("remote done"))
    elsewhere = RunManager()
    await runs.start(conversation.id, user.id, "go")
    while not runs._runs[str(conversation.id)].agent.running:
        await asyncio.sleep(0)
    removed = await elsewhere.submit(conversation.id, user.id, "remove me", "follow_up")
    kept = await elsewhere.submit(conversation.id, user.id, "from afar", "follow_up")
    assert removed and kept and removed != kept
    assert [item.id for item in runs._runs[str(conversation.id)].agent.queued] == [removed, kept]
    assert await elsewhere.unqueue(conversation.id, removed) is True
    assert await elsewhere.unqueue(conversation.id, removed) is False
    gate.open()
    await runs.wait(conversation.id)
    stored = await sync_to_async(list)(
        Event.objects.filter(conversation=conversation, type="user").values_list(
            "payload", flat=True)
    )  # fmt: skip
    users = [(e["content"], e.get("mode")) for e in stored]
    assert users == [("go", None), ("from afar", "follow_up")]
    # Idle now: a prompt with a mode runs at once, from either manager.
    assert await elsewhere.submit(conversation.id, user.id, "fresh", "steer") is None
    await elsewhere.wait(conversation.id)


async def test_the_queue_has_a_limit(alice, model_server, agent_settings):
    agent_settings.HARNESS_RUNS_PER_MINUTE = 100
    user, conversation = alice
    gate = Gate(agent_settings, user)
    model_server.enqueue(tool_reply(gate.call))
    await runs.start(conversation.id, user.id, "go")
    run = runs._runs[str(conversation.id)]
    while not run.agent.running:
        await asyncio.sleep(0)
    for n in range(20):
        assert await runs.submit(conversation.id, user.id, f"q{n}", "follow_up")
    with pytest.raises(RunRefused) as refused:
        await runs.submit(conversation.id, user.id, "one more", "follow_up")
    assert refused.value.code == "queue_full"
    await runs.cancel(conversation.id)
    gate.open()
    await runs.wait(conversation.id)


def _event(conversation, event):
    Event.objects.create(conversation=conversation, seq=event.seq, type=event.type,
                         payload=event.to_dict())  # fmt: skip


@pytest.mark.django_db
def test_a_crash_mid_run_shows_the_undelivered_queued_prompts_as_not_sent(agent_settings):
    owner = make_user("gwen")
    conversation = Conversation.objects.create(
        owner=owner, model="m", state="running", last_seq=5, lease_owner="gone:1:x",
        lease_until=timezone.now() + timedelta(seconds=60),
        history=[{"role": "user", "content": [{"type": "text", "text": "go"}]}],
    )  # fmt: skip
    for event in (
        UserEvent(seq=1, content="go"),
        QueuedEvent(seq=2, id="a1", content="delivered one", mode="follow_up"),
        QueuedEvent(seq=3, id="b2", content="never sent", mode="follow_up"),
        QueuedEvent(seq=4, id="c3", content="steer lost", mode="steer"),
        UserEvent(seq=5, content="delivered one", mode="follow_up"),
    ):
        _event(conversation, event)
    before = page(owner, conversation)
    assert 'data-queued="b2"' in before and 'data-queued="c3"' in before
    assert 'data-queued="a1"' not in before
    Conversation.objects.filter(id=conversation.id).update(lease_until=timezone.now())
    [(_, closing)] = interrupt(expired())
    assert [(e.type, getattr(e, "id", None), getattr(e, "reason", None)) for e in closing] == [
        ("unqueued", "b2", "not_sent"), ("unqueued", "c3", "not_sent"), ("error", None, None),
        ("status", None, None)]  # fmt: skip
    shown = page(owner, conversation)
    assert "data-queued=" not in shown
    assert shown.count('data-code="not_sent"') == 2
    assert "never sent" in shown and "steer lost" in shown


async def test_queued_prompts_count_once_towards_the_per_minute_limit(
    alice, model_server, agent_settings
):
    agent_settings.HARNESS_RUNS_PER_MINUTE = 3
    user, conversation = alice
    first, second = Gate(agent_settings, user), Gate(agent_settings, user)
    model_server.enqueue(tool_reply(first.call), text_reply("done"), text_reply("a done"),
                         tool_reply(second.call), text_reply("done again"))  # fmt: skip

    await runs.start(conversation.id, user.id, "go")
    while not runs._runs[str(conversation.id)].agent.running:
        await asyncio.sleep(0)
    assert await runs.submit(conversation.id, user.id, "a", "follow_up")  # 2 sent
    first.open()
    await runs.wait(conversation.id)
    # "a" was delivered: counted once (when it was queued), so a third prompt may go.
    await runs.start(conversation.id, user.id, "third")
    stored = Event.objects.filter(conversation=conversation, type="user", payload__content="third")
    while not await sync_to_async(stored.exists)():  # the count reads the event log
        await asyncio.sleep(0.01)
    with pytest.raises(RunRefused) as refused:
        await runs.submit(conversation.id, user.id, "fourth", "follow_up")
    assert refused.value.code == "quota_rate"
    assert runs._runs[str(conversation.id)].agent.queued == []
    second.open()
    await runs.wait(conversation.id)


async def test_a_catch_up_shows_the_queue_whole(alice, model_server, agent_settings):
    """A page that missed frames asks for what follows its seq: the queue it gets back
    includes what was queued before that seq (and not what left it since)."""
    agent_settings.HARNESS_RUNS_PER_MINUTE = 100
    user, conversation = alice
    gate = Gate(agent_settings, user)
    model_server.enqueue(tool_reply(gate.call), text_reply("done"), text_reply("b done"))
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "go"}))
    await receive_until(ws, 'data-state="running_tool"')
    ids = []
    for text in ("a", "b"):
        await ws.send_to(text_data=json.dumps({"content": text, "mode": "follow_up"}))
        html = await receive_until(ws, 'data-outcome="accepted"', f"{text}</span>")
        ids.append([qid for qid in QUEUED_ID.findall(html) if qid not in ids][-1])
    await ws.send_to(text_data=json.dumps({"action": "unqueue", "id": ids[0]}))
    await receive_until(ws, 'id="queue"')
    queued_b = await sync_to_async(
        lambda: (
            Event.objects.get(conversation=conversation, type="queued", payload__id=ids[1]).seq
        )  # fmt: skip
    )()
    await ws.send_to(text_data=json.dumps({"action": "sync", "after": queued_b}))
    reply = await receive_until(ws, 'data-sync="1"', 'id="queue"')
    queue = reply[reply.index('<ul id="queue"') :]
    queue = queue[: queue.index("</ul>")]
    assert f'data-queued="{ids[1]}"' in queue and f'data-queued="{ids[0]}"' not in queue
    gate.open()
    await collect_until_idle(ws)
    await runs.wait(conversation.id)
    await ws.disconnect()
