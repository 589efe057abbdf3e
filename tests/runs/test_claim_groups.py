"""Claims that arrive together are made together (agent/runs/claim.py, agent/server/
grouping.py): one trip to the claims' thread and one transaction for the group, each claim
in a savepoint, so a refusal or a failure stays its own."""

from __future__ import annotations

import asyncio

import pytest
from django.db import OperationalError

from agent.models import Conversation, User
from agent.runs import claim as claims
from agent.runs.claim import RunRefused, Setup

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def groups(monkeypatch) -> list[int]:
    """The size of each group of claims handled."""
    sizes: list[int] = []
    handle = claims._claim_all

    def counted(requests):
        sizes.append(len(requests))
        return handle(requests)

    monkeypatch.setattr(claims, "_claim_all", counted)
    return sizes


def _conversations(n: int, **fields) -> list[Conversation]:
    owner = User.objects.create_user("ada", password="pw-ada-12345")
    return [Conversation.objects.create(owner=owner, model="m", **fields) for _ in range(n)]


def _sent_together(conversations, prompt="go"):
    async def send():
        return await asyncio.gather(
            *(claims.claim(c.id, c.owner_id, prompt) for c in conversations),
            return_exceptions=True,
        )

    return asyncio.run(send())


def test_claims_sent_together_are_one_group_and_a_refusal_undoes_only_its_own(groups, settings):
    settings.HARNESS_CONCURRENT_RUNS = 10
    *idle, busy = _conversations(6)
    Conversation.objects.filter(id=busy.id).update(state="running")
    results = _sent_together([*idle, busy])
    assert groups == [6]
    assert all(isinstance(result, Setup) for result in results[:5]), results
    assert isinstance(results[5], RunRefused) and results[5].code == "prompt_running"
    states = dict(Conversation.objects.values_list("id", "state"))
    assert [states[c.id] for c in idle] == ["running"] * 5
    assert [Conversation.objects.get(id=c.id).title for c in idle] == ["go"] * 5
    assert Conversation.objects.get(id=busy.id).title == ""  # the refused one: untouched


def test_a_refusal_after_the_claims_update_leaves_that_conversation_idle(groups, settings):
    settings.HARNESS_CONCURRENT_RUNS = 2
    conversations = _conversations(3)
    results = _sent_together(conversations)
    assert groups == [3]
    assert [isinstance(r, Setup) for r in results] == [True, True, False]
    assert results[2].code == "quota_concurrent"  # the group's own claims count
    states = [Conversation.objects.get(id=c.id).state for c in conversations]
    assert states == ["running", "running", "idle"]


def test_a_claim_failing_in_the_database_fails_alone_and_the_others_are_made(groups, monkeypatch):
    conversations = _conversations(3)
    broken = conversations[1].id
    claim_one = claims._claim

    def failing(request):
        if request.conversation_id == broken:
            raise OperationalError("disk I/O error")
        return claim_one(request)

    monkeypatch.setattr(claims, "_claim", failing)
    results = _sent_together(conversations)
    assert groups == [3]  # the group failed as a whole, then each claim went alone
    assert isinstance(results[1], OperationalError)
    assert isinstance(results[0], Setup) and isinstance(results[2], Setup)
    states = [Conversation.objects.get(id=c.id).state for c in conversations]
    assert states == ["running", "idle", "running"]
