"""What the egress proxy and the git relay write: each connection's (or git operation's)
log row (the oldest go past ``HARNESS_EGRESS_LOG_ROWS``), each user's bytes a day, and the
/metrics counters (agent/server/metrics.py)."""

from __future__ import annotations

import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F

from agent.models import EgressDay, EgressLog
from agent.server import metrics


def today() -> datetime.date:
    return datetime.datetime.now(datetime.UTC).date()


def used_today(user_id: int | None) -> int:
    if user_id is None:
        return 0
    row = EgressDay.objects.filter(user_id=user_id, date=today()).first()
    return row.bytes if row else 0


def bound_bytes() -> int:
    return settings.HARNESS_EGRESS_MB_PER_DAY * 1024 * 1024


def record(*, user_id, conversation_id, host: str, port: int, allowed: bool, reason: str = "",
           up: int = 0, down: int = 0) -> None:  # fmt: skip
    metrics.EGRESS_CONNECTIONS.inc(label="allowed" if allowed else "refused")
    metrics.EGRESS_BYTES.inc(up, label="up")
    metrics.EGRESS_BYTES.inc(down, label="down")
    with transaction.atomic():
        EgressLog.objects.create(user_id=user_id, conversation_id=conversation_id,
                                 host=host[:255], port=port, allowed=allowed,
                                 reason=reason[:500], bytes_up=up, bytes_down=down)  # fmt: skip
        if user_id is not None and up + down:
            _charge(user_id, up + down)
    _trim()


def _charge(user_id: int, amount: int) -> None:
    """Add to the user's day in one UPDATE; the row is made when missing (two connections
    ending at once may both try: the loser's insert gives way to the winner's row)."""
    day = EgressDay.objects.filter(user_id=user_id, date=today())
    if day.update(bytes=F("bytes") + amount):
        return
    try:
        with transaction.atomic():
            EgressDay.objects.create(user_id=user_id, date=today(), bytes=amount)
    except IntegrityError:
        day.update(bytes=F("bytes") + amount)


def _trim() -> None:
    keep = settings.HARNESS_EGRESS_LOG_ROWS
    cutoff = EgressLog.objects.order_by("-id").values_list("id", flat=True)[keep : keep + 1]
    if cutoff:
        EgressLog.objects.filter(id__lte=cutoff[0]).delete()
