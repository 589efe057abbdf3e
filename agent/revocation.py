"""Closing a user's sockets and stopping their runs when access is withdrawn.

Sockets join a group per user and per session. Deactivating a user (admin, shell) closes
every socket of theirs and cancels their running prompts; signing out closes the sockets
of that session. Both go through the channel layer, so they reach every server process.
(Every frame is also re-checked against the database, so nothing depends on delivery.)
"""

from __future__ import annotations

import hashlib
import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth.signals import user_logged_out
from django.db.models.signals import post_save
from django.dispatch import receiver

log = logging.getLogger(__name__)


def user_group(user_id) -> str:
    return f"user.{int(user_id)}"


def session_group(session_key: str) -> str:
    return f"session.{hashlib.sha256(session_key.encode()).hexdigest()[:40]}"


def _send(group: str) -> None:
    try:
        async_to_sync(get_channel_layer().group_send)(group, {"type": "user.revoked"})
    except Exception:  # a layer outage must not break an admin's save; frames re-check
        log.exception("could not notify %s", group)


def revoke_user(user) -> None:
    from .models import Conversation
    from .runs import cancel_from_sync

    _send(user_group(user.pk))
    running = Conversation.objects.filter(owner=user, state=Conversation.State.RUNNING)
    for conversation_id in running.values_list("id", flat=True):
        cancel_from_sync(conversation_id)


@receiver(post_save, dispatch_uid="harness-revoke-inactive-user")
def _on_user_saved(sender, instance, created, **kwargs) -> None:
    from .models import User

    if sender is User and not created and not instance.is_active:
        revoke_user(instance)


@receiver(user_logged_out, dispatch_uid="harness-revoke-session")
def _on_logged_out(sender, request, user, **kwargs) -> None:
    key = getattr(getattr(request, "session", None), "session_key", None)
    if key:
        _send(session_group(key))
