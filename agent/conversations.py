"""Owner-checked access to conversations: every lookup names its owner."""

from __future__ import annotations

import contextlib
import uuid

from django.db.models import Q, QuerySet

from .models import Conversation, Event, User

TITLE_LENGTH = 60


def _get_conversation_for_user(
    conversation_id, user, *, active_in_db: bool = False
) -> Conversation | None:
    """The conversation if ``user`` (active, signed in) owns it, else None (shown as 404).
    ``active_in_db``: the account's being active is read from the database, in the same
    query, instead of from ``user`` (a long-lived connection's user object is stale)."""
    if not getattr(user, "is_authenticated", False):
        return None
    if not active_in_db and not user.is_active:
        return None
    try:
        key = uuid.UUID(str(conversation_id))
    except ValueError:
        return None
    found = Conversation.objects.filter(id=key, owner_id=user.pk)
    if active_in_db:
        found = found.filter(owner__is_active=True)
    return found.first()


def conversations_of(user) -> QuerySet[Conversation]:
    return Conversation.objects.filter(owner=user).order_by("-updated")


def new_conversation(user: User, model: str) -> Conversation:
    return Conversation.objects.create(owner=user, model=model)


def title_from_prompt(prompt: str) -> str:
    first = " ".join(prompt.strip().split())
    return first if len(first) <= TITLE_LENGTH else first[: TITLE_LENGTH - 1] + "…"


def snapshot(conversation_id, owner, after: int = 0) -> tuple[Conversation, list[dict]] | None:
    """The conversation and its stored events after ``after``, consistent with its
    ``last_seq`` (the row is locked while reading, so a batch is either wholly in or out),
    plus the tool calls that the included results answer. None when not the owner's."""
    from django.db import connection, transaction

    # PostgreSQL: lock the row so a batch is wholly in or out. SQLite (no row locks, and an
    # IMMEDIATE transaction would queue every reader behind the writer): reading last_seq
    # first and events up to it gives the same guarantee, since a batch commits its events
    # and its last_seq together.
    locking = connection.vendor == "postgresql"
    with transaction.atomic() if locking else contextlib.nullcontext():
        rows = Conversation.objects.filter(id=conversation_id, owner=owner, owner__is_active=True)
        conversation = (rows.select_for_update() if locking else rows).first()
        if conversation is None:
            return None
        # Partial-text rows always come whole: they are the block still streaming, which a
        # catch-up shows entire.
        events = list(
            Event.objects.filter(conversation=conversation, seq__lte=conversation.last_seq)
            .filter(Q(seq__gt=after) | Q(type="text_delta"))
            .order_by("seq").values_list("payload", flat=True)
        )  # fmt: skip
        answered = {str(e["id"]) for e in events if e["type"] == "tool_result"}
        have = {str(e["id"]) for e in events if e["type"] == "tool_call"}
        if answered - have:
            calls = Event.objects.filter(
                conversation=conversation, type="tool_call", payload__id__in=list(answered - have)
            ).values_list("payload", flat=True)
            events = sorted([*calls, *events], key=lambda e: e["seq"])
    return conversation, events
