"""What the egress proxy writes: each connection's log row (the oldest go past
``HARNESS_EGRESS_LOG_ROWS``), each user's bytes a day, and the /metrics counters
(agent/server/metrics.py)."""

from __future__ import annotations

import datetime

from django.conf import settings
from django.db import transaction
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
            day, _ = EgressDay.objects.get_or_create(user_id=user_id, date=today())
            EgressDay.objects.filter(pk=day.pk).update(bytes=F("bytes") + up + down)
    _trim()


def _trim() -> None:
    keep = settings.HARNESS_EGRESS_LOG_ROWS
    cutoff = EgressLog.objects.order_by("-id").values_list("id", flat=True)[keep : keep + 1]
    if cutoff:
        EgressLog.objects.filter(id__lte=cutoff[0]).delete()
