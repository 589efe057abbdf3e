"""A conversation's stored events, read consistently with its ``last_seq``: what the first
page load, a socket's catch-up and the SSE replay start from."""

from __future__ import annotations

import contextlib

from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce

from agent.access import accessible_to
from agent.core.events import Event as CoreEvent
from agent.core.events import TextDeltaEvent, ToolCallEvent, ToolResultEvent, UserEvent
from agent.models import Conversation, Event
from agent.runs.branches import active_path
from agent.runs.eventlog import from_stored, queue_events


def snapshot(
    conversation_id, user, after: int = 0, branch: int | None = None
) -> tuple[Conversation, list[CoreEvent]] | None:
    """The conversation and its events (``_read``), or None when ``user`` may not reach it."""
    found = _read(conversation_id, user, after, branch)
    return None if found is None else found[:2]


def latest(conversation_id, user, tail: int) -> tuple[Conversation, list[CoreEvent], bool] | None:
    """``snapshot`` of a page that shows a long conversation's latest parts: its latest
    prompts' events only, and whether earlier ones were left out."""
    found = _read(conversation_id, user, tail=tail)
    return None if found is None else (found[0], found[1], found[2] > 0)


def _read(
    conversation_id, user, after: int = 0, branch: int | None = None, tail: int = 0
) -> tuple[Conversation, list[CoreEvent], int] | None:
    """The conversation and its stored events after ``after``, consistent with its
    ``last_seq`` (the row is locked while reading, so a batch is either wholly in or out),
    plus the tool calls that the included results answer and, after a seq, the events
    that made the running prompt's queue up to it (a catch-up shows the queue whole).
    None when ``user`` may not reach it. Only the events on the active branch's path (or
    ``branch``'s). ``tail``: only the latest prompts' events, from the newest prompt that
    started a run at least ``tail`` events before the end (the parts they make do not
    depend on the events before); the seq they start from is returned (0: all)."""
    # PostgreSQL: lock the row so a batch is wholly in or out. SQLite (no row locks, and an
    # IMMEDIATE transaction would queue every reader behind the writer): reading last_seq
    # first and events up to it gives the same guarantee, since a batch commits its events
    # and its last_seq together.
    locking = connection.vendor == "postgresql"
    with transaction.atomic() if locking else contextlib.nullcontext():
        rows = accessible_to(user.pk).filter(id=conversation_id)
        if tail:  # read with the row: a long conversation's page costs no query more
            rows = rows.annotate(tail_start=_tail_start(tail))
        # Only the conversation's row (the query joins its owner's, which a claim holds
        # while it updates this one: locking both deadlocked), and in the mode an UPDATE
        # takes, so the event log's inserts, which only reference the row, go on.
        locked = rows.select_for_update(of=("self",), no_key=True)
        conversation = (locked if locking else rows).first()
        if conversation is None:
            return None
        # Partial-text rows always come whole: they are the block still streaming, which a
        # catch-up shows entire.
        path = active_path(conversation, branch)
        start = conversation.tail_start if tail else 0
        events = from_stored(
            Event.objects.filter(conversation=conversation, seq__lte=conversation.last_seq,
                                 seq__gte=start)
            .filter(path)
            .filter(Q(seq__gt=after) | Q(type=TextDeltaEvent.type))
            .order_by("seq").values_list("payload", flat=True)
        )  # fmt: skip
        answered = {e.id for e in events if isinstance(e, ToolResultEvent)}
        have = {e.id for e in events if isinstance(e, ToolCallEvent)}
        if answered - have:
            calls = Event.objects.filter(
                conversation=conversation, type=ToolCallEvent.type,
                payload__id__in=list(answered - have),
            ).values_list("payload", flat=True)  # fmt: skip
            events = sorted([*from_stored(calls), *events], key=lambda e: e.seq)
        if after:  # the prompt that the events after it answer (their Regenerate names it)
            prompt = prompt_before(conversation, after + 1, branch)
            events = sorted([*prompt, *events], key=lambda e: e.seq) if prompt else events
        if after and conversation.state == Conversation.State.RUNNING:
            earlier = [e for e in queue_events(conversation.id, after) if e.seq <= after]
            if earlier:
                events = sorted([*earlier, *events], key=lambda e: e.seq)
    return conversation, events, start


def _tail_start(tail: int) -> Coalesce:
    """The seq of the newest prompt of the conversation's active branch that started a run
    (a queued prompt's delivery carries its ``mode``) at least ``tail`` events before the
    end, and after another event of that branch (so that something is left out); else 0.
    The active branch's own events from there on are its path's (a fork's are newer than
    what it forked from)."""
    own = Event.objects.filter(conversation=OuterRef("conversation"), branch=OuterRef("branch"),
                               seq__lt=OuterRef("seq"))  # fmt: skip
    prompts = (
        Event.objects.filter(conversation=OuterRef("pk"), branch=OuterRef("active_branch"),
                             type=UserEvent.type, seq__lte=OuterRef("last_seq") - tail)
        .exclude(payload__has_key="mode").filter(Exists(own))
        .order_by("-seq").values("seq")[:1]
    )  # fmt: skip
    return Coalesce(Subquery(prompts), Value(0))


def prompt_before(conversation: Conversation, before: int,
                  branch: int | None = None) -> list[CoreEvent]:  # fmt: skip
    """The newest prompt (``user`` event) before seq ``before`` on the active path (or
    ``branch``'s): what an answer that follows is the answer to, for the page that shows
    it without that prompt (a catch-up, a regenerated answer's frames). At most one."""
    rows = (
        Event.objects.filter(conversation=conversation, type=UserEvent.type, seq__lt=before)
        .filter(active_path(conversation, branch)).order_by("-seq")
        .values_list("payload", flat=True)[:1]
    )  # fmt: skip
    return from_stored(rows)
