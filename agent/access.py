"""Who may reach which conversation: the one access helper.

Every view, socket, API endpoint, run claim and credential re-check asks here, so the rule
lives in one place (sharing will add roles here). Whether an account is active is read
from the database in the same query: a long-lived connection's user object is stale.
"""

from __future__ import annotations

import uuid

from django.db.models import QuerySet

from agent.models import Conversation, User


def owned_by(user_id) -> QuerySet[Conversation]:
    """The user's own conversations, whatever the account's state (a run's claim tells an
    inactive owner apart from a missing conversation)."""
    return Conversation.objects.filter(owner_id=user_id)


def accessible_to(user_id) -> QuerySet[Conversation]:
    """The conversations ``user_id`` may read and drive now: their own, while active."""
    return owned_by(user_id).filter(owner__is_active=True)


def conversation_for(user, conversation_id) -> Conversation | None:
    """The conversation if ``user`` (signed in) may reach it, else None (shown as 404:
    another user's conversation is not found, never forbidden)."""
    if not getattr(user, "is_authenticated", False):
        return None
    try:
        key = uuid.UUID(str(conversation_id))
    except ValueError:
        return None
    return accessible_to(user.pk).filter(id=key).first()


def conversations_of(user) -> QuerySet[Conversation]:
    """The user's conversation list, newest first."""
    return accessible_to(user.pk).order_by("-updated")


def empty_conversation_of(user) -> Conversation | None:
    """The user's newest conversation with nothing in it yet (no events, no title): "New
    conversation" goes back to it rather than piling up empty ones."""
    return (
        conversations_of(user)
        .filter(last_seq=0, title="", events__isnull=True)
        .exclude(state=Conversation.State.RUNNING)
        .first()
    )


def new_conversation(user: User, model: str, agent: str = "harness") -> Conversation:
    return Conversation.objects.create(owner=user, model=model, agent=agent)
