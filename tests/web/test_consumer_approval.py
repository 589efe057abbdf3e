"""Tool approval over the page's WebSocket, in the page and across run managers
(docs/API.md), the real SDK against the test model server."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from asgiref.sync import sync_to_async

from agent.models import Event
from agent.runs.manager import RunManager, runs
from testkit.model_server import text_reply, tool_reply
from tests.web.test_consumer import collect_until_idle, connected
from tests.web.test_consumer_queue import agent_settings, alice, page, receive_until  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

APPROVAL_ID = re.compile(r'data-approval-id="([^"]+)"')


@pytest.fixture
def asking(alice):  # noqa: F811
    user, conversation = alice
    conversation.approval = "ask"
    conversation.save(update_fields=["approval"])
    return user, conversation


async def stored(conversation, kind):
    return await sync_to_async(list)(
        Event.objects.filter(conversation=conversation, type=kind).values_list("payload", flat=True)
    )


async def test_the_page_shows_a_pending_approval_and_approving_runs_the_call(
    asking,
    model_server,
    agent_settings,  # noqa: F811
):
    user, conversation = asking
    workspace = agent_settings.HARNESS_WORKSPACES / str(user.id)
    model_server.enqueue(tool_reply(("bash", {"command": "echo hi > ran.txt"})), text_reply("ok"))
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "go"}))
    html = await receive_until(ws, 'data-part="approval"', 'data-state="waiting_input"')
    assert "Waiting for approval: bash" in html
    assert "echo hi &gt; ran.txt" in html  # exactly what will run
    (call_id,) = set(APPROVAL_ID.findall(html))
    # A reload (another tab) shows it, with its controls.
    reloaded = await sync_to_async(page)(user, conversation)
    assert 'data-part="approval"' in reloaded and 'data-decision="approve"' in reloaded
    assert 'data-decision="deny"' in reloaded and 'data-state="waiting_input"' in reloaded
    assert not (workspace / "ran.txt").exists()
    await ws.send_to(text_data=json.dumps({"action": "approve", "id": call_id}))
    html = await collect_until_idle(ws)
    assert 'data-approval-state="approve"' in html and "Approved by alice" in html
    assert (workspace / "ran.txt").read_text() == "hi\n"
    # Decided: a second decision is refused beside the composer, nothing changes.
    await ws.send_to(text_data=json.dumps({"action": "deny", "id": call_id}))
    assert "already decided" in await ws.receive_from(timeout=5)
    reloaded = await sync_to_async(page)(user, conversation)
    assert 'data-decision="approve"' not in reloaded and "Approved by alice" in reloaded
    await ws.disconnect()


async def test_deny_with_a_reason_and_approve_all_over_the_socket(
    asking,
    model_server,
    agent_settings,  # noqa: F811
):
    user, conversation = asking
    workspace = agent_settings.HARNESS_WORKSPACES / str(user.id)
    model_server.enqueue(
        tool_reply(("write", {"path": "no.txt", "content": "x"})),
        tool_reply(("write", {"path": "a.txt", "content": "a"})),
        tool_reply(("write", {"path": "b.txt", "content": "b"})),
        text_reply("done"),
    )  # fmt: skip
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "go"}))
    html = await receive_until(ws, 'data-state="waiting_input"')
    first = APPROVAL_ID.findall(html)[-1]
    await ws.send_to(text_data=json.dumps({"action": "deny", "id": first, "reason": "not that"}))
    html = await receive_until(
        ws, 'data-approval-state="deny"', 'data-approval-id="', "waiting_input"
    )
    second = [i for i in APPROVAL_ID.findall(html) if i != first][-1]
    assert "Denied by alice: not that" in html
    await ws.send_to(text_data=json.dumps({"action": "approve", "id": second, "approve_all": "1"}))
    await collect_until_idle(ws)
    assert not (workspace / "no.txt").exists()
    assert (workspace / "b.txt").read_text() == "b"  # approved with "all for this run"
    assert len(await stored(conversation, "approval")) == 2
    decisions = [
        (d["decision"], d.get("reason")) for d in await stored(conversation, "approval_decision")
    ]
    assert decisions == [("deny", "not that"), ("approve", None)]
    await ws.disconnect()


async def test_a_decision_reaches_the_run_through_the_control_group(
    asking,
    model_server,
    agent_settings,  # noqa: F811
):
    user, conversation = asking
    model_server.enqueue(tool_reply(("write", {"path": "far.txt", "content": "x"})),
                         text_reply("done"))  # fmt: skip
    elsewhere = RunManager()
    await runs.start(conversation.id, user.id, "go")
    agent = runs._runs[str(conversation.id)].agent
    while not agent.pending_approvals:
        await asyncio.sleep(0.01)
    (call_id,) = agent.pending_approvals
    assert await elsewhere.decide(conversation.id, "toolu_x", "approve", None, "bob") == "unknown"
    assert await elsewhere.decide(conversation.id, call_id, "approve", None, "bob") == "decided"
    await runs.wait(conversation.id)
    (decision,) = await stored(conversation, "approval_decision")
    assert decision["by"] == "bob"
    assert await elsewhere.decide(conversation.id, call_id, "approve", None, "bob") is None


async def test_a_cancel_while_waiting_closes_the_card(asking, model_server, agent_settings):  # noqa: F811
    user, conversation = asking
    model_server.enqueue(tool_reply(("write", {"path": "never.txt", "content": "x"})))
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "go"}))
    await receive_until(ws, 'data-state="waiting_input"')
    await ws.send_to(text_data=json.dumps({"action": "cancel"}))
    html = await collect_until_idle(ws)
    assert 'data-approval-state="closed"' in html
    reloaded = await sync_to_async(page)(user, conversation)
    assert 'data-decision="approve"' not in reloaded and "Not run" in reloaded
    await ws.disconnect()
