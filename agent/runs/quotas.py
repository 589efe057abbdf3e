"""What a prompt is refused for before it runs: the owner's budget, prompts sent in the last
minute and prompts running at once, each checked under the claim's transaction."""

from __future__ import annotations

import time

from django.conf import settings

from agent.access import owned_by
from agent.core.agent import Refused
from agent.models import Conversation, User
from agent.runs import rate, usage


class RunRefused(Refused):
    """A prompt that is not run: ``code`` for programs, ``message`` for people."""


def hold_owner(owner_id: int) -> None:
    """Lock the owner's row until the claim's transaction ends (``no_key``: as the rate's
    UPDATE does, and the image room's check: attachments.py)."""
    list(User.objects.select_for_update(no_key=True).filter(pk=owner_id).values_list("pk"))


def check_quotas(owner: User, *, per_minute: bool = True) -> None:
    """Prompts sent in the last minute (``per_minute``), then prompts running at once,
    counted once the owner's row is held (by the rate's UPDATE, else a lock): the owner's
    other claims, in other processes, have committed or wait, so they cannot all pass on
    one count (on PostgreSQL 11 of 12 prompts sent at once ran against a limit of 2)."""
    if per_minute:
        check_rate(owner)
    else:
        hold_owner(owner.pk)
    running = owned_by(owner.pk).filter(state=Conversation.State.RUNNING).count()
    if running >= settings.HARNESS_CONCURRENT_RUNS:
        raise RunRefused(
            "quota_concurrent",
            f"You already have {settings.HARNESS_CONCURRENT_RUNS} prompts running; wait for "
            "one to finish or cancel it.",
        )


def check_budget(owner) -> None:
    """The owner's spend this month (UTC) against their budget: a prompt
    that would start past it is refused (a running one's model calls are each checked as
    they are made: agent/runs/spend.py)."""
    over = usage.over_budget(owner)
    if over is not None:
        raise RunRefused("budget_exceeded", usage.budget_message(*over))


def check_rate(owner: User) -> None:
    """Prompts sent in the last minute: those that started a run and those queued on one
    (each once: a queued prompt's delivery is not counted again); this one is counted when
    it passes. Checked and counted in one UPDATE: prompts sent at once (other processes,
    other transactions) cannot all pass on the same reading of the count."""
    now, limit = time.time(), settings.HARNESS_RUNS_PER_MINUTE
    if rate.count_prompt(owner.pk, now, limit):
        return
    owner.refresh_from_db(fields=["rate_window", "rate_count", "rate_previous"])
    raise RunRefused(
        "quota_rate",
        f"You have sent {rate.sent_last_minute(owner, now)} prompts in the last minute (the "
        f"limit is {limit}); wait a moment and send it again.",
    )
