"""Runs whose process died: interrupted on lease expiry, partial text and history kept."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.utils import timezone

from agent.models import Conversation, Event, User
from agent.runs.recovery import expired, interrupt
from tests.history_check import assert_valid_history

pytestmark = pytest.mark.django_db


def running_conversation(owner, *, lease_seconds: float, partial: str = ""):
    conversation = Conversation.objects.create(
        owner=owner, model="m", state="running", last_seq=6, lease_owner="gone:1:x",
        lease_until=timezone.now() + timedelta(seconds=lease_seconds),
        history=[
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "x"}}]},
        ],
    )  # fmt: skip
    if partial:
        Event.objects.create(conversation=conversation, seq=6, type="text_delta",
                             payload={"type": "text_delta", "seq": 6, "timestamp": 1,
                                      "content": partial})  # fmt: skip
    return conversation


@pytest.fixture
def owner():
    return User.objects.create_user("frank", password="pw-frank-123")


def test_expired_lease_is_interrupted_keeping_partial_text_and_a_valid_history(owner):
    conversation = running_conversation(owner, lease_seconds=-1, partial="half an ans")
    assert len(interrupt(expired())) == 1
    conversation.refresh_from_db()
    assert conversation.state == "interrupted" and conversation.lease_until is None
    events = list(conversation.events.order_by("seq").values_list("payload", flat=True))
    assert [e["type"] for e in events] == ["text", "error", "status"]
    assert events[0]["content"] == "half an ans" and events[1]["code"] == "interrupted"
    skip = 10_000  # past any seq the dead process may have sent without storing
    assert [e["seq"] for e in events] == [6 + skip + 1, 6 + skip + 2, 6 + skip + 3]
    assert conversation.last_seq == 6 + skip + 3
    assert conversation.history[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "half an ans"}],
    }
    assert_valid_history(conversation.history)


def test_a_live_lease_is_left_alone(owner):
    conversation = running_conversation(owner, lease_seconds=30)
    assert interrupt(expired()) == []
    conversation.refresh_from_db()
    assert conversation.state == "running"


def test_recover_runs_all_interrupts_every_running_conversation_at_start_up(owner):
    live = running_conversation(owner, lease_seconds=30)
    idle = Conversation.objects.create(owner=owner, model="m", state="idle")
    call_command("recover_runs", "--all")
    live.refresh_from_db()
    idle.refresh_from_db()
    assert live.state == "interrupted" and idle.state == "idle"


def test_opening_the_page_of_a_dead_run_shows_it_ended(client, owner):
    conversation = running_conversation(owner, lease_seconds=-1, partial="partial words")
    client.force_login(owner)
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert "partial words" in page and 'data-state="error"' in page
    conversation.refresh_from_db()
    assert conversation.state == "interrupted"


@pytest.mark.django_db(transaction=True)
async def test_a_run_that_loses_its_lease_stops(settings, model_server, tmp_path):
    from agent.runs.manager import runs
    from testkit.model_server import text_reply

    settings.ANTHROPIC_API_KEY, settings.ANTHROPIC_BASE_URL = "k", model_server.url
    settings.HARNESS_WORKSPACES, settings.HARNESS_BASH = tmp_path, "off"
    settings.HARNESS_RUN_LEASE = 2
    user = await sync_to_async(User.objects.create_user)("ivan", password="pw-ivan-123")
    conversation = await sync_to_async(Conversation.objects.create)(owner=user, model="m")
    model_server.enqueue(text_reply("slow " * 400, delay=0.01))
    await runs.start(conversation.id, user.pk, "go")
    await asyncio.sleep(0.3)
    # Another process decided this one was dead and took the conversation over.
    await sync_to_async(Conversation.objects.filter(id=conversation.id).update)(
        lease_owner="someone-else"
    )
    async with asyncio.timeout(5):
        await runs.wait(conversation.id)
    last = await sync_to_async(
        lambda: Event.objects.filter(conversation=conversation).order_by("-seq").first()
    )()
    assert json.loads(json.dumps(last.payload))["state"] == "error"


def test_a_pass_renews_this_processs_runs_and_reaps_only_the_others(owner):
    """The reaper's pass: the runs this process holds (running or still preparing) get
    their leases renewed, even lapsed ones; a lapsed run of a gone process is interrupted."""
    from agent.runs.claim import PROCESS_ID
    from agent.runs.control import _renew_and_reap

    ours = running_conversation(owner, lease_seconds=-5)
    Conversation.objects.filter(id=ours.id).update(lease_owner=PROCESS_ID)
    theirs = running_conversation(owner, lease_seconds=-5)
    done = _renew_and_reap({str(ours.id)})
    assert [conversation.id for conversation, _ in done] == [theirs.id]
    ours.refresh_from_db()
    assert ours.state == "running" and ours.lease_until > timezone.now()


@pytest.mark.django_db(transaction=True)
async def test_a_claim_preparing_longer_than_its_lease_is_not_reaped_by_its_own_process(
    settings, model_server, tmp_path, monkeypatch
):
    """Under load a claim's workspace preparation (a user's first sandbox) outlasted the
    lease, and the process's own reaper marked the run interrupted before it started."""
    from agent.runs import claim
    from agent.runs.manager import runs
    from testkit.model_server import text_reply

    settings.ANTHROPIC_API_KEY, settings.ANTHROPIC_BASE_URL = "k", model_server.url
    settings.HARNESS_WORKSPACES, settings.HARNESS_BASH = tmp_path, "off"
    settings.HARNESS_RUN_LEASE = 2  # the reaper passes every second
    prepare = claim.workspace_for

    def slow_workspace_for(owner_id):
        import time

        time.sleep(3.5)  # the preparation under load: longer than the lease
        return prepare(owner_id)

    monkeypatch.setattr(claim, "workspace_for", slow_workspace_for)
    user = await sync_to_async(User.objects.create_user)("jane", password="pw-jane-123")
    conversation = await sync_to_async(Conversation.objects.create)(owner=user, model="m")
    model_server.enqueue(text_reply("made it"))
    await runs.start_background()
    await runs.start(conversation.id, user.pk, "go")
    async with asyncio.timeout(20):
        await runs.wait(conversation.id)
    await sync_to_async(conversation.refresh_from_db)()
    assert conversation.state == "idle"
    types = await sync_to_async(
        lambda: list(conversation.events.order_by("seq").values_list("type", flat=True))
    )()
    assert "error" not in types and "text" in types
