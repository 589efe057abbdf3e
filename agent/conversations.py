"""Owner-checked access to conversations: every lookup names its owner."""

from __future__ import annotations

import uuid

from django.db.models import QuerySet

from .models import Conversation, Event, User

TITLE_LENGTH = 60


def _get_conversation_for_user(conversation_id, user) -> Conversation | None:
    """The conversation if ``user`` (active, signed in) owns it, else None (shown as 404)."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return None
    try:
        key = uuid.UUID(str(conversation_id))
    except ValueError:
        return None
    return Conversation.objects.filter(id=key, owner=user).first()


def conversations_of(user) -> QuerySet[Conversation]:
    return Conversation.objects.filter(owner=user).order_by("-updated")


def new_conversation(user: User, model: str) -> Conversation:
    return Conversation.objects.create(owner=user, model=model)


def title_from_prompt(prompt: str) -> str:
    first = " ".join(prompt.strip().split())
    return first if len(first) <= TITLE_LENGTH else first[: TITLE_LENGTH - 1] + "…"


def event_payloads(conversation: Conversation, after: int = 0) -> list[dict]:
    return list(
        Event.objects.filter(conversation=conversation, seq__gt=after)
        .order_by("seq")
        .values_list("payload", flat=True)
    )
