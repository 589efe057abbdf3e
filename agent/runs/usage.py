"""Spend per user and day, and the monthly budget (the user's own, else
``HARNESS_MONTHLY_BUDGET_USD``).

The event log's writer adds each stored usage event to its owner's row for that day (one
upsert, in the batch's transaction); the budget checks (a prompt's claim, and every model
call: agent/runs/spend.py) and the usage figures then read at most a month of rows, never
the event log itself.
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Sum

from agent.core.events import USAGE_FIELDS
from agent.models import UsageDay, User

_ZERO = Decimal(0)


def add(owner_id: int, usage_events: list[dict[str, Any]]) -> None:
    """Add usage events (their wire form) to the owner's days. Inside the caller's
    transaction; concurrent writers for the same day add up (ON CONFLICT … DO UPDATE)."""
    days: dict[datetime.date, list] = {}
    for event in usage_events:
        day = datetime.datetime.fromtimestamp(event["timestamp"] / 1000, datetime.UTC).date()
        totals = days.setdefault(day, [_ZERO, 0, 0])
        totals[0] += Decimal(str(event.get("cost_usd") or 0))
        totals[1] += sum(event.get(name) or 0 for name in USAGE_FIELDS if name != "output_tokens")
        totals[2] += event.get("output_tokens") or 0
    # Raw SQL: the ORM's upsert (bulk_create with update_conflicts) can only replace a
    # row's values with the new ones; concurrent writers must add to them in one statement.
    table = connection.ops.quote_name(UsageDay._meta.db_table)
    with connection.cursor() as cursor:
        for day, (cost, tokens_in, tokens_out) in days.items():
            cursor.execute(
                f"INSERT INTO {table} (user_id, date, cost_usd, input_tokens, output_tokens) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (user_id, date) DO UPDATE SET "
                f"cost_usd = {table}.cost_usd + excluded.cost_usd, "
                f"input_tokens = {table}.input_tokens + excluded.input_tokens, "
                f"output_tokens = {table}.output_tokens + excluded.output_tokens",
                [owner_id, day, cost, tokens_in, tokens_out],
            )


def month_start(today: datetime.date | None = None) -> datetime.date:
    today = today or datetime.datetime.now(datetime.UTC).date()
    return today.replace(day=1)


def month_to_date(user_id: int) -> Decimal:
    spent = UsageDay.objects.filter(user_id=user_id, date__gte=month_start()).aggregate(
        total=Sum("cost_usd")
    )["total"]
    return Decimal(spent or 0)


def budget_of(user: User) -> Decimal | None:
    """The user's monthly budget: their own, else the deployment's (None: no limit)."""
    if user.monthly_budget_usd is not None:
        return user.monthly_budget_usd
    return settings.HARNESS_MONTHLY_BUDGET_USD


def over_budget(user: User, unstored: Decimal = _ZERO) -> tuple[Decimal, Decimal] | None:
    """(spent, budget) when this month's spend has reached the budget. ``unstored``: spent
    by a run and not stored yet (the event log's writer is a moment behind the model)."""
    budget = budget_of(user)
    if budget is None:
        return None
    spent = month_to_date(user.pk) + unstored
    return (spent, budget) if spent >= budget else None


def budget_message(spent: Decimal, budget: Decimal) -> str:
    """What a prompt, a queued prompt or a model call refused for the budget says."""
    return (
        f"This month's budget of ${budget:.2f} is spent (${spent:.2f} so far); it renews "
        "on the 1st (UTC), or an administrator can raise it."
    )


def report(user: User, days: int = 31) -> dict[str, Any]:
    """``GET /api/usage``: this month's spend, the budget and the last ``days`` days."""
    since = datetime.datetime.now(datetime.UTC).date() - datetime.timedelta(days=days - 1)
    rows = UsageDay.objects.filter(user=user, date__gte=since)
    budget = budget_of(user)
    return {
        "month_to_date_usd": float(month_to_date(user.pk)),
        "budget_usd": None if budget is None else float(budget),
        "days": [
            {
                "date": row.date.isoformat(),
                "cost_usd": float(row.cost_usd),
                "input_tokens": row.input_tokens,
                "output_tokens": row.output_tokens,
            }
            for row in rows
        ],  # fmt: skip
    }


def team_days(since: datetime.date) -> list[tuple]:
    """Every user's days from ``since`` (the admin's usage page, staff only):
    (date, username, cost, input tokens, output tokens), by date then username."""
    rows = UsageDay.objects.filter(date__gte=since).order_by("date", "user__username")
    return list(rows.values_list("date", "user__username", "cost_usd", "input_tokens",
                                 "output_tokens"))  # fmt: skip
