"""The per-minute prompt limit (HARNESS_RUNS_PER_MINUTE), counted, not searched for.

Each user has two one-minute windows: the count of this minute and of the one before,
weighted into a sliding minute (the earlier window's count times the share of it still
inside the last 60 seconds, rounded up: a burst at a window's end is not forgiven at the
next one's start). A prompt's start reads the owner's row, which it loads anyway, and adds
one with a single UPDATE; counting the event log instead grew with the user's history and
was the largest part of a run's start for a long one (31 ms at 2,000 prompts on SQLite).
"""

from __future__ import annotations

import math
import time

from django.db.models import Case, F, Value, When

from agent.models import User
from agent.server.prepared import PreparedUpdate


def sent_last_minute(user: User, now: float | None = None) -> int:
    """Prompts ``user`` sent in the last minute (a sliding estimate from the two windows)."""
    now = time.time() if now is None else now
    window, into = divmod(now, 60)
    window = int(window)
    if user.rate_window == window:
        current, previous = user.rate_count, user.rate_previous
    elif user.rate_window == window - 1:
        current, previous = 0, user.rate_count
    else:
        return 0
    return current + math.ceil(previous * (1 - into / 60))


def _counting(user_id, window, before):
    return User.objects.filter(pk=user_id), {
        "rate_previous": Case(
            When(rate_window=window, then=F("rate_previous")),
            When(rate_window=before, then=F("rate_count")),
            default=Value(0),
        ),
        "rate_count": Case(When(rate_window=window, then=F("rate_count") + 1), default=Value(1)),
        "rate_window": Value(window),
    }


# Compiled once per database connection (agent/server/prepared.py): every prompt runs it.
_COUNT = PreparedUpdate(_counting, int, int, int)


def count_prompt(user_id: int, now: float | None = None) -> None:
    """One more prompt sent by ``user_id``: one UPDATE, which every process may run at once
    (each SET reads the row as it was before the UPDATE)."""
    window = int((time.time() if now is None else now) // 60)
    _COUNT(user_id, window, window - 1)
