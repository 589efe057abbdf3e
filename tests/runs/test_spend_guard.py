"""The monthly budget checked where it is spent (agent/runs/spend.py), as attacked: a prompt
under the budget whose run goes on spending past it. Follow-ups queued before the budget
was spent are refused when delivered, without a model call. Through the run manager, the
real writer and database, and the test model server."""

from __future__ import annotations

import asyncio
import datetime
import threading
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async

from agent.core.events import UsageEvent
from agent.core.loop import CallRefused
from agent.models import Conversation, Event, UsageDay, User
from agent.runs import usage
from agent.runs.claim import RunRefused, check_queueing
from agent.runs.manager import RunManager
from agent.runs.spend import SpendGuard
from testkit.model_server import text_reply

pytestmark = pytest.mark.django_db(transaction=True)

CALL = Decimal("0.00011")  # what one answer of the test model costs (10 tokens in, 20 out)


@pytest.fixture
def paid(settings, model_server, tmp_path):
    settings.ANTHROPIC_API_KEY = "test-key"
    settings.ANTHROPIC_BASE_URL = model_server.url
    settings.HARNESS_WORKSPACES = tmp_path / "workspaces"
    settings.HARNESS_BASH = "off"
    settings.HARNESS_RUNS_PER_MINUTE = 100
    model_server.fallback = lambda body: text_reply("answered")
    return model_server


def conversation_of_penny(agent: str = "harness") -> Conversation:
    """A conversation of a new user's, whose budget is the deployment's (a user's own has
    whole cents only: the test model's answers cost a hundredth of one)."""
    owner = User.objects.create_user("penny", password="pw-penny-1234")
    return Conversation.objects.create(owner=owner, model="claude-haiku-4-5", agent=agent)


async def until(condition, seconds: float = 10.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.01)


def stored(conversation) -> list[dict]:
    rows = Event.objects.filter(conversation=conversation).order_by("seq")
    return list(rows.values_list("payload", flat=True))


async def test_follow_ups_queued_under_the_budget_are_refused_once_it_is_spent(paid, settings):
    settings.HARNESS_MONTHLY_BUDGET_USD = CALL - Decimal("0.00001")  # one answer spends it
    conversation = await sync_to_async(conversation_of_penny)()
    cid, owner_id = conversation.id, conversation.owner_id
    release = threading.Event()  # the first answer waits while the follow-ups are queued
    paid.fallback = lambda body: release.wait(10) and text_reply("answered")
    manager = RunManager()
    assert await manager.submit(cid, owner_id, "first", "follow_up") is None  # started
    await until(lambda: paid.requests)
    queued = [await manager.submit(cid, owner_id, f"more {n}", "follow_up") for n in range(3)]
    assert all(queued)  # nothing was spent yet: queued
    release.set()
    await manager.wait(cid)
    assert len(paid.requests) == 1  # the follow-up delivered was never sent to the model
    events = await sync_to_async(stored)(conversation)
    error = [e for e in events if e["type"] == "error"][-1]
    assert error["code"] == "budget_exceeded" and "renews on the 1st" in error["message"]
    assert events[-1]["type"] == "status" and events[-1]["state"] == "error"
    dropped = [e["id"] for e in events if e["type"] == "unqueued" and e["reason"] == "not_sent"]
    assert dropped == queued[1:]
    with pytest.raises(RunRefused) as refused:  # and the next prompt is told the same
        await manager.submit(cid, owner_id, "again", "follow_up")
    assert (refused.value.code, refused.value.message) == ("budget_exceeded", error["message"])


def test_a_prompt_queued_past_the_budget_is_refused_as_a_new_one_would_be(paid, settings):
    settings.HARNESS_MONTHLY_BUDGET_USD = CALL
    conversation = conversation_of_penny()
    Conversation.objects.filter(pk=conversation.pk).update(state="running")
    UsageDay.objects.create(user_id=conversation.owner_id, date=datetime.date.today(),
                            cost_usd=CALL)  # fmt: skip
    with pytest.raises(RunRefused) as refused:
        check_queueing.func(conversation.id, conversation.owner_id)
    assert refused.value.code == "budget_exceeded"


async def test_a_runs_spend_counts_before_it_is_stored_and_once_after(settings):
    settings.HARNESS_MONTHLY_BUDGET_USD = 2 * CALL + CALL / 2
    conversation = await sync_to_async(conversation_of_penny)()
    guard = SpendGuard(conversation.owner_id)
    answers = [UsageEvent(input_tokens=10, output_tokens=20, cost_usd=float(CALL))] * 3
    await guard()  # nothing spent
    for answer in answers[:2]:
        guard.spent(answer)
    await guard()  # 2 of 2.5 calls' worth, none stored yet
    async with guard.storing(answers[:1]):  # as the run's writer stores a batch
        await sync_to_async(usage.add)(conversation.owner_id, [answers[0].to_dict()])
    await guard()  # one stored, one not: still two, not three
    guard.spent(answers[2])
    with pytest.raises(CallRefused) as refused:
        await guard()
    assert refused.value.code == "budget_exceeded"
