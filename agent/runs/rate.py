"""The per-minute prompt limit (HARNESS_RUNS_PER_MINUTE), counted, not searched for.

Each user has two one-minute windows: the count of this minute and of the one before,
weighted into a sliding minute (the earlier window's count times the share of it still
inside the last 60 seconds, rounded up: a burst at a window's end is not forgiven at the
next one's start). A prompt's start adds one with a single UPDATE that also checks the
limit (its WHERE), so prompts sent at once cannot all pass on one reading of the count:
PostgreSQL re-checks the WHERE of an UPDATE that waited for the row on the row as the
other left it (SQLite runs writers one at a time). Counting the event log instead grew with
the user's history and was the largest part of a run's start for a long one (31 ms at
2,000 prompts on SQLite).
"""

from __future__ import annotations

import time

from django.db.models import BigIntegerField, Case, F, Value, When
from django.db.models.functions import Cast
from django.db.models.lookups import LessThanOrEqual

from agent.models import User

MINUTE_MS = 60_000
# No limit (``count_prompt`` without one): larger than any weighted count.
UNLIMITED = 1 << 62


def _windows(now: float) -> tuple[int, int]:
    """This minute's window, and how much of the window before is still inside the last
    60 seconds, in milliseconds (whole numbers: the UPDATE weighs with the same figures)."""
    window, into = divmod(now, 60)
    return int(window), MINUTE_MS - int(into * 1000)


def sent_last_minute(user: User, now: float | None = None) -> int:
    """Prompts ``user`` sent in the last minute (a sliding estimate from the two windows)."""
    window, share = _windows(time.time() if now is None else now)
    if user.rate_window == window:
        current, previous = user.rate_count, user.rate_previous
    elif user.rate_window == window - 1:
        current, previous = 0, user.rate_count
    else:
        return 0
    return current + -(-previous * share // MINUTE_MS)  # (the earlier share rounded up)


def _counting(user_id, window, before, share, most):
    """The count's UPDATE, only where the count is still within ``most``: the sliding
    estimate times a minute in ms, so the rounding up is exact in whole numbers
    (current + ceil(previous × share / minute) < limit ⇔ current × minute + previous ×
    share ≤ (limit − 1) × minute)."""
    # (64-bit: a large limit times a minute in ms would overflow PostgreSQL's integer)
    count = Cast("rate_count", BigIntegerField())
    previous = Cast("rate_previous", BigIntegerField())
    weighted = Case(
        When(rate_window=window, then=count * MINUTE_MS + previous * share),
        When(rate_window=before, then=count * share),
        default=Value(0),
        output_field=BigIntegerField(),
    )
    within = User.objects.filter(LessThanOrEqual(weighted, most), pk=user_id)
    return within, {
        "rate_previous": Case(
            When(rate_window=window, then=F("rate_previous")),
            When(rate_window=before, then=F("rate_count")),
            default=Value(0),
        ),
        "rate_count": Case(When(rate_window=window, then=F("rate_count") + 1), default=Value(1)),
        "rate_window": Value(window),
    }


def count_prompt(user_id: int, now: float | None = None, limit: int | None = None) -> bool:
    """One more prompt sent by ``user_id``, unless ``limit`` prompts were sent in the last
    minute already (False: not counted). One UPDATE, which every process may run at once
    (each SET reads the row as it was before the UPDATE)."""
    window, share = _windows(time.time() if now is None else now)
    most = UNLIMITED if limit is None else (limit - 1) * MINUTE_MS
    within, changes = _counting(user_id, window, window - 1, share, most)
    return bool(within.update(**changes))
