"""The monthly budget checked where it is spent: before every model call
that costs, whoever makes it. The claim checks it once when a prompt starts, but a run goes
on calling the model after that: the built-in loop for each turn, for the follow-ups and
steers delivered into the same run and for its compactions, and a CLI agent for each call
it sends through the gateway (agent/runs/llm_gateway.py). Each run has one ``SpendGuard``,
awaited before each of those calls; a spent budget refuses the call.

The writer stores a run's usage events a moment after the model reported them, so the
guard adds what its run has spent and not stored yet: calls in quick succession cannot
each pass on a total that misses the last one. A check and the store of a batch that cost
something never overlap, so a cost is counted exactly once: in the sum not yet stored, or
in the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from decimal import Decimal
from functools import partial

from channels.db import database_sync_to_async
from django.db import DatabaseError

from agent.core.events import Event, UsageEvent
from agent.core.loop import CallRefused
from agent.models import User
from agent.runs import usage

log = logging.getLogger(__name__)

UNCHECKED = (
    "The server could not check this month's budget (its database failed), so nothing was "
    "sent to the model. Try again in a moment."
)


def _cost(event: Event) -> Decimal:
    return Decimal(str(event.cost_usd)) if isinstance(event, UsageEvent) else Decimal(0)


@partial(database_sync_to_async, thread_sensitive=False)
def _over(owner_id: int, unstored: Decimal) -> tuple[Decimal, Decimal] | None:
    # The owner's budget read anew each time: an administrator may change it mid-run.
    owner = User.objects.only("monthly_budget_usd").get(pk=owner_id)
    return usage.over_budget(owner, unstored)


class SpendGuard:
    """One run's check before each model call (``await guard()``), ``CallRefused`` when the
    owner's budget is spent. The run tells it what it ``spent`` (each event on its way to
    the log) and stores its batches ``storing`` them (the database counts them then)."""

    def __init__(self, owner_id: int):
        self.owner_id = owner_id
        self._unstored = Decimal(0)
        self._counting = asyncio.Lock()  # a check, or a store that moves spend to the database

    def spent(self, event: Event) -> None:
        self._unstored += _cost(event)

    @contextlib.asynccontextmanager
    async def storing(self, events: Iterable[Event]) -> AsyncIterator[None]:
        """Around the store of a batch: once it is committed, its cost leaves the unstored
        sum before any check reads the database (a failed store leaves it there)."""
        cost = sum((_cost(event) for event in events), Decimal(0))
        if not cost:  # (most batches: nothing to wait for)
            yield
            return
        async with self._counting:
            yield
            self._unstored -= cost

    async def __call__(self) -> None:
        async with self._counting:
            try:
                over = await _over(self.owner_id, self._unstored)
            except (DatabaseError, User.DoesNotExist) as exc:
                # Unchecked is refused: a failing database must not open the budget.
                log.warning("could not check the budget of user %s: %s", self.owner_id, exc)
                raise CallRefused("budget_unchecked", UNCHECKED) from exc
        if over is not None:
            raise CallRefused("budget_exceeded", usage.budget_message(*over))
