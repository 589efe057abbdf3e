"""The per-minute prompt limit (HARNESS_RUNS_PER_MINUTE), counted, not searched for.

Each user has two one-minute windows: the count of this minute and of the one before,
weighted into a sliding minute (the earlier window's count times the share of it still
inside the last 60 seconds, rounded up: a burst at a window's end is not forgiven at the
next one's start). A prompt's start reads the windows with the user's row locked (``SELECT
… FOR NO KEY UPDATE`` on PostgreSQL; SQLite's write transactions take their lock up front),
checks the limit and writes the new count, so prompts sent at once cannot all pass on one
reading of the count: each waits for the row until the one before has counted. Counting
the event log instead grew with the user's history (31 ms at 2,000 prompts on SQLite); one
UPDATE that checked and counted in SQL cost more to build than it saved (two plain
statements are cheaper than one conditional one: the prompt's start pays it).
"""

from __future__ import annotations

import time

from django.db import transaction

from agent.models import User

MINUTE_MS = 60_000


def _windows(now: float) -> tuple[int, int]:
    """This minute's window, and how much of the window before is still inside the last
    60 seconds, in milliseconds."""
    window, into = divmod(now, 60)
    return int(window), MINUTE_MS - int(into * 1000)


def _sent(window: int, share: int, last: int, count: int, previous: int) -> int:
    """Prompts sent in the last minute, from the row's windows (``last``: the window its
    ``count`` is of, ``previous``: the count of the one before it)."""
    if last == window:
        current, earlier = count, previous
    elif last == window - 1:
        current, earlier = 0, count
    else:
        return 0
    return current + -(-earlier * share // MINUTE_MS)  # (the earlier share rounded up)


def sent_last_minute(user: User, now: float | None = None) -> int:
    """Prompts ``user`` sent in the last minute (a sliding estimate from the two windows)."""
    window, share = _windows(time.time() if now is None else now)
    return _sent(window, share, user.rate_window, user.rate_count, user.rate_previous)


def count_prompt(user_id: int, now: float | None = None, limit: int | None = None) -> bool:
    """One more prompt sent by ``user_id``, unless ``limit`` prompts were sent in the last
    minute already (False: not counted). In the caller's transaction (or one of its own):
    the row stays locked until it ends, so a concurrent count reads this one's."""
    window, share = _windows(time.time() if now is None else now)
    with transaction.atomic(savepoint=False):
        rows = User.objects.select_for_update(no_key=True).filter(pk=user_id)
        found = list(rows.values_list("rate_window", "rate_count", "rate_previous")[:1])
        if not found:
            return False
        last, count, previous = found[0]
        if limit is not None and _sent(window, share, last, count, previous) >= limit:
            return False
        if last == window:
            changes = {"rate_count": count + 1}
        else:
            earlier = count if last == window - 1 else 0
            changes = {"rate_window": window, "rate_count": 1, "rate_previous": earlier}
        User.objects.filter(pk=user_id).update(**changes)
    return True
