"""A conversation's stored events, read consistently with its ``last_seq``: what the first
page load, a socket's catch-up and the SSE replay start from."""

from __future__ import annotations

import contextlib

from django.db import connection, transaction
from django.db.models import Q

from agent.access import accessible_to
from agent.core.events import Event as CoreEvent
from agent.core.events import TextDeltaEvent, ToolCallEvent, ToolResultEvent, UserEvent
from agent.models import Conversation, Event
from agent.runs.branches import active_path
from agent.runs.eventlog import from_stored, queue_events


def snapshot(
    conversation_id, user, after: int = 0, branch: int | None = None
) -> tuple[Conversation, list[CoreEvent]] | None:
    """The conversation and its stored events after ``after``, consistent with its
    ``last_seq`` (the row is locked while reading, so a batch is either wholly in or out),
    plus the tool calls that the included results answer and, after a seq, the events
    that made the running prompt's queue up to it (a catch-up shows the queue whole).
    None when ``user`` may not reach it. Only the events on the active branch's path (or
    ``branch``'s)."""
    # PostgreSQL: lock the row so a batch is wholly in or out. SQLite (no row locks, and an
    # IMMEDIATE transaction would queue every reader behind the writer): reading last_seq
    # first and events up to it gives the same guarantee, since a batch commits its events
    # and its last_seq together.
    locking = connection.vendor == "postgresql"
    with transaction.atomic() if locking else contextlib.nullcontext():
        rows = accessible_to(user.pk).filter(id=conversation_id)
        conversation = (rows.select_for_update() if locking else rows).first()
        if conversation is None:
            return None
        # Partial-text rows always come whole: they are the block still streaming, which a
        # catch-up shows entire.
        events = from_stored(
            Event.objects.filter(conversation=conversation, seq__lte=conversation.last_seq)
            .filter(active_path(conversation, branch))
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
    return conversation, events


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
