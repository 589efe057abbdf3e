"""The event log's writer: batches of every run in the process, stored by group commit.

Each run hands its batches here and awaits them; one database call at a time, on the event
log's own thread (agent/server/grouping.py), stores all that are pending, in one
transaction. At 250 streaming sessions that is a few
transactions a second instead of hundreds, each paying one BEGIN/COMMIT and one trip to a
worker thread (the profile of the one-transaction-per-batch version showed the database
calls, not the streaming, taking most of the server's CPU). A batch that fails is retried
alone, so one conversation's bad batch never loses another's.
"""

from __future__ import annotations

import errno
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import F, OuterRef, Subquery
from django.db.models.functions import Coalesce, Greatest

from agent.core.events import (
    USAGE_FIELDS,
    CompactionEvent,
    QueuedEvent,
    StatusEvent,
    TextDeltaEvent,
    TextEvent,
    UnqueuedEvent,
    UsageEvent,
    UserEvent,
    from_dict,
)
from agent.core.events import Event as CoreEvent
from agent.models import Conversation, Event
from agent.runs import search, usage
from agent.server import grouping, metrics

STATE_FOR_STATUS = {"thinking": "running", "running_tool": "running", "waiting_input": "running",
                    "idle": "idle",
                    "error": "error"}  # fmt: skip
DELTA, TEXT = TextDeltaEvent.type, TextEvent.type


# What a database or file system says when it has no room left: SQLite's SQLITE_FULL (and
# the I/O error it gives when the WAL cannot grow), PostgreSQL's "could not extend file",
# the kernel's ENOSPC / EDQUOT.
_FULL_MESSAGES = ("database or disk is full", "disk i/o error", "no space left on device",
                  "could not extend file", "disk quota exceeded")  # fmt: skip
_FULL_SQLSTATES = ("53100",)  # PostgreSQL disk_full


def storage_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it wraps: Django wraps the driver's) says the
    storage is out of space. Such a failure does not pass by itself: retrying a run's
    writes only piles up unsaved events, so the run is ended instead (agent/runs/run.py)."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        state = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
        if state in _FULL_SQLSTATES:
            return True
        if any(text in str(exc).lower() for text in _FULL_MESSAGES):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def from_stored(payloads) -> list[CoreEvent]:
    """Stored rows' payloads back as typed events (the read side of this edge)."""
    return [from_dict(payload) for payload in payloads]


QUEUE_TYPES = (QueuedEvent.type, UnqueuedEvent.type, UserEvent.type)
RUN_START_SCAN = 200  # user events looked through, newest first, for the run's own prompt


def queue_events(conversation_id, upto: int | None = None) -> list[CoreEvent]:
    """The events that make the queue of the latest run up to seq ``upto`` (its prompt,
    then what was queued, removed and delivered): a run's queue starts empty with it."""
    rows = Event.objects.filter(conversation_id=conversation_id)
    if upto is not None:
        rows = rows.filter(seq__lte=upto)
    prompts = rows.filter(type=UserEvent.type).order_by("-seq")
    start = 0
    for seq, payload in prompts.values_list("seq", "payload")[:RUN_START_SCAN]:
        if "mode" not in payload:  # not a queued prompt: the one that started the run
            start = seq
            break
    found = rows.filter(type__in=QUEUE_TYPES, seq__gte=start).order_by("seq")
    return from_stored(found.values_list("payload", flat=True))


def stored_form(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows a batch adds to the event log. Consecutive text deltas become one row (seq
    = the last seq it covers, content joined): the partial text of a block is stored with
    every frame, cheaply, so catch-up and crash recovery lose none of it. The rows go when
    the block's complete ``text`` event is stored."""
    rows: list[dict[str, Any]] = []
    for event in events:
        if event["type"] == DELTA and rows and rows[-1]["type"] == DELTA:
            rows[-1] = {**event, "content": rows[-1]["content"] + event["content"]}
        else:
            rows.append(event)
    return rows


# The conversation's figures a page's live fragments show: the title, the meter; a stored
# batch that changed them returns them read again (``_apply``), for the broadcast.
# (``project_id``: a project conversation's parts offer to restore its files.)
SHOWN = ("title", "input_tokens", "output_tokens", "cache_read_input_tokens",
         "cache_creation_input_tokens", "cost_usd", "context_tokens", "context_window",
         "project_id")  # fmt: skip


@dataclass
class Batch:
    conversation_id: Any
    events: list[dict[str, Any]]
    history: list[dict[str, Any]] | None = None  # the run's messages, when they changed


def _insert_events(rows: list[tuple[Any, dict[str, Any]]]) -> None:
    """(conversation id, event JSON) pairs as event log rows: one statement (SQLite's
    parameter limit may split a large group)."""
    Event.objects.bulk_create([
        Event(conversation_id=conversation_id, seq=e["seq"], type=e["type"], payload=e,
              branch=e.get("branch", 0))
        for conversation_id, e in rows
    ])  # fmt: skip


def _delete_partial_text(conversation_id) -> None:
    """The conversation's partial-text rows, in one DELETE: nothing refers to events and
    nothing listens for their deletion, so Django deletes them without reading them."""
    Event.objects.filter(conversation_id=conversation_id, type=DELTA).delete()


def _apply(batch: Batch) -> Conversation | None:
    """Store one batch and fold it into its conversation's row (inside the caller's
    transaction), so the database always sits at a frame boundary: catch-up relies on it.
    Returns the row re-read when the batch changed the token totals (the meter shows them)."""
    rows = stored_form(batch.events)
    changes: dict[str, Any] = {"last_seq": batch.events[-1]["seq"]}
    added: dict[str, Any] = {}  # token and cost totals: added to, in the same UPDATE
    if batch.history is not None:
        changes["history"] = batch.history  # so a crash loses none of the conversation
    for event in rows:
        if event["type"] == StatusEvent.type:
            changes["state"] = STATE_FOR_STATUS[event["state"]]
        elif event["type"] == UsageEvent.type:
            for name in USAGE_FIELDS:
                added[name] = added.get(name, 0) + event[name]
            added["cost_usd"] = added.get("cost_usd", 0) + Decimal(str(event["cost_usd"]))
            if event.get("context_tokens"):
                changes["context_tokens"] = event["context_tokens"]
                changes["context_window"] = event.get("context_window") or 0
        elif event["type"] == CompactionEvent.type:
            changes["context_tokens"] = event["tokens_after"]
    texts = [e["seq"] for e in rows if e["type"] == TEXT]
    if texts:
        # The block is complete: its partial-text rows give way to the whole text.
        _delete_partial_text(batch.conversation_id)
        rows = [e for e in rows if e["type"] != DELTA or e["seq"] > max(texts)]
    _insert_events([(batch.conversation_id, e) for e in rows])
    sums = {name: F(name) + amount for name, amount in added.items()}
    conversation = Conversation.objects.filter(id=batch.conversation_id)
    conversation.update(**changes, **sums)
    search.index(batch.conversation_id, rows)
    if not added and "context_tokens" not in changes:
        return None
    # The meter's figures (only those: a whole row costs more to read than to store a
    # batch), and the owner, whose days count what was spent (budgets, usage figures).
    found = list(conversation.only("owner_id", *SHOWN)[:1])
    if not found:
        return None
    spent = [e for e in rows if e["type"] == UsageEvent.type]
    if spent:
        usage.add(found[0].owner_id, spent)
    return found[0]


def _is_partial_text(batch: Batch) -> bool:
    return batch.history is None and all(e["type"] == DELTA for e in batch.events)


def _apply_partial_texts(batches: list[Batch]) -> None:
    """Many conversations' partial text at once: one INSERT and one UPDATE for the lot.
    At 250 streaming sessions these are 250 batches a second, and two statements each
    was the largest item of the server's profile after the SDK.

    Each conversation's ``last_seq`` becomes its newest stored seq, which is its batch's
    last (a row of joined deltas carries the last seq it covers, and nothing is stored
    past ``last_seq``); it only ever moves forward. One subquery says that for every
    row: a ``Case`` with a ``When`` per conversation cost the ORM 1.7 ms to build for ten
    conversations, the subquery 0.7 (docs/PERFORMANCE.md)."""
    _insert_events([(batch.conversation_id, e) for batch in batches
                    for e in stored_form(batch.events)])  # fmt: skip
    newest = (Event.objects.filter(conversation=OuterRef("pk"))
              .order_by("-seq").values("seq")[:1])  # fmt: skip
    Conversation.objects.filter(pk__in=[batch.conversation_id for batch in batches]).update(
        last_seq=Greatest(F("last_seq"), Coalesce(Subquery(newest), F("last_seq")))
    )


def _apply_group(batches: list[Batch]) -> list[Conversation | None]:
    """Apply a group in one transaction: the partial text of conversations that have
    nothing else in the group together, everything else batch by batch, in order."""
    counts = Counter(batch.conversation_id for batch in batches)
    together = [b for b in batches if counts[b.conversation_id] == 1 and _is_partial_text(b)]
    if together:
        _apply_partial_texts(together)
    grouped = {id(b) for b in together}
    return [None if id(b) in grouped else _apply(b) for b in batches]


def _store_all(batches: list[Batch]) -> list[Conversation | None | BaseException]:
    """One transaction for all; if it fails, each batch alone (a failure is its own)."""
    return grouping.together_or_alone(
        batches, _apply_group, _apply, "event-log batches", urgent=True
    )


def wire(events: list[CoreEvent], branch: int = 0) -> list[dict[str, Any]]:
    """The events' JSON; on a branch other than the first, each carries ``branch``
    (docs/API.md)."""
    if not branch:
        return [event.to_dict() for event in events]
    return [{**event.to_dict(), "branch": branch} for event in events]


async def store(
    conversation_id,
    events: list[CoreEvent],
    history: list[dict[str, Any]] | None = None,
    branch: int = 0,
) -> Conversation | None:
    """Store a batch (with the group pending in this process) and return when committed.
    The events become their wire JSON here: the event log stores exactly that."""
    group = grouping.for_loop("harness-eventlog", _store_all,
                              observe=metrics.EVENT_LOG_WRITES.observe)  # fmt: skip
    return await group.submit(Batch(conversation_id, wire(events, branch), history))
