"""The quotas a claim checks: the per-minute limit protects spend, so the offline demo model
(no API key) is not held to it; the limit on prompts running at once holds for every model."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from agent.models import Conversation, User
from agent.runs import rate
from agent.runs.claim import RunRefused, claim, release

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def rita(settings):
    settings.HARNESS_RUNS_PER_MINUTE = 2
    settings.HARNESS_CONCURRENT_RUNS = 1
    return User.objects.create_user("rita", password="pw-rita-1234")


def sent_this_minute(owner, count: int) -> Conversation:
    """A conversation of ``owner``, who sent ``count`` prompts in the last minute."""
    for _ in range(count):
        rate.count_prompt(owner.pk)
    owner.refresh_from_db()
    return Conversation.objects.create(owner=owner, model="claude-haiku-4-5")


def claim_now(conversation) -> None:
    async_to_sync(claim)(conversation.id, conversation.owner_id, "one more")


def test_a_paid_model_is_held_to_the_prompts_per_minute(rita, settings):
    settings.ANTHROPIC_API_KEY = "sk-test"
    conversation = sent_this_minute(rita, 2)
    with pytest.raises(RunRefused) as refused:
        claim_now(conversation)
    assert refused.value.code == "quota_rate"
    conversation.refresh_from_db()
    assert conversation.state == "idle"


def test_a_started_prompt_counts_and_a_refused_one_does_not(rita, settings):
    settings.ANTHROPIC_API_KEY = "sk-test"
    settings.HARNESS_CONCURRENT_RUNS = 5
    first, second, third = (sent_this_minute(rita, 0) for _ in range(3))
    claim_now(first)
    claim_now(second)
    with pytest.raises(RunRefused):
        claim_now(third)
    rita.refresh_from_db()
    assert rate.sent_last_minute(rita) == 2
    for conversation in (first, second):
        async_to_sync(release)(conversation.id)


def test_the_offline_demo_model_is_not_held_to_the_prompts_per_minute(rita, settings):
    settings.ANTHROPIC_API_KEY = None
    conversation = sent_this_minute(rita, 5)
    claim_now(conversation)
    conversation.refresh_from_db()
    assert conversation.state == "running"
    async_to_sync(release)(conversation.id)


def test_the_offline_demo_model_is_held_to_the_prompts_running_at_once(rita, settings):
    settings.ANTHROPIC_API_KEY = None
    first, second = sent_this_minute(rita, 0), sent_this_minute(rita, 0)
    claim_now(first)
    with pytest.raises(RunRefused) as refused:
        claim_now(second)
    assert refused.value.code == "quota_concurrent"
    async_to_sync(release)(first.id)
