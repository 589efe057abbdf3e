"""The socket answers every prompt frame: accepted, or refused and why, in the alert beside
the composer (never as a part of the transcript), so the page keeps the typed text unless
the prompt runs. A conversation deleted elsewhere closes its sockets at once with 4404."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from agent.models import Conversation
from agent.runs.claim import RunRefused
from agent.runs.manager import runs
from testkit.model_server import text_reply
from tests.web import test_consumer
from tests.web.test_consumer import collect_until_idle, connected

agent_settings, alice = test_consumer.agent_settings, test_consumer.alice

pytestmark = pytest.mark.django_db(transaction=True)

ALERT = re.compile(
    r'^<div id="composer-alert" class="composer-alert" role="alert"([^>]*)>(.*)</div>$'
)


def alert(reply: str) -> tuple[dict[str, str], str]:
    """The composer alert a reply is made of: its data attributes and its text."""
    found = ALERT.match(reply.strip())
    assert found, reply
    attributes = dict(re.findall(r'data-(\w+)="([^"]*)"', found[1]))
    assert 'hx-swap-oob="true"' in found[1]
    return attributes, found[2]


async def test_an_accepted_prompt_is_answered_accepted_on_its_socket_only(alice, model_server):
    user, conversation = alice
    model_server.enqueue(text_reply("fine"))
    sender = await connected(conversation, user)
    watcher = await connected(conversation, user)  # another tab on the same conversation
    await sender.send_to(text_data=json.dumps({"content": "hello"}))
    sent = await collect_until_idle(sender)
    watched = await collect_until_idle(watcher)
    await runs.wait(conversation.id)
    answers = [m for m in re.split(r"(?=<div id=)", sent) if 'id="composer-alert"' in m]
    assert len(answers) == 1
    attributes, text = alert(answers[0])
    assert attributes == {"outcome": "accepted"} and text == ""
    assert "composer-alert" not in watched and "hello" in watched
    await sender.disconnect()
    await watcher.disconnect()


@pytest.mark.parametrize(
    "code",
    ["quota_rate", "quota_concurrent", "prompt_too_large", "prompt_running", "not_found",
     "forbidden", "storage_full"],
)  # fmt: skip
async def test_every_refusal_goes_beside_the_composer(alice, monkeypatch, code):
    user, conversation = alice

    async def refuse(*args, **kwargs):
        raise RunRefused(code, f"Refused <because> {code}.")

    monkeypatch.setattr("agent.web.socket_frames.accept_prompt", refuse)
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "keep me"}))
    reply = await ws.receive_from()
    attributes, text = alert(reply)
    assert attributes == {"code": code, "outcome": "refused"}
    assert text == f"Refused &lt;because&gt; {code}."
    assert "#messages" not in reply and "data-part" not in reply
    await ws.disconnect()


async def test_deleting_the_conversation_closes_its_sockets_with_4404(alice):
    user, conversation = alice
    ws = await connected(conversation, user)
    client = Client()
    await sync_to_async(client.force_login)(user)
    response = await sync_to_async(client.post)(f"/c/{conversation.id}/delete")
    assert response.status_code == 302
    received = ""
    async with asyncio.timeout(5):
        while (message := await ws.receive_output(timeout=5))["type"] != "websocket.close":
            received += message.get("text", "")
    assert message["code"] == 4404
    attributes, text = alert(received)
    assert attributes == {"code": "forbidden"} and text == "This conversation is not available."
    assert not await sync_to_async(Conversation.objects.filter(id=conversation.id).exists)()
