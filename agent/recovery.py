"""Conversations left "running" by a server that stopped: mark them interrupted.

The run is gone with its process; what it had saved stays. The history is repaired (a
tool call without a result gets an error result) so the next prompt works, and the
transcript gets an error and a final status so it reads as ended. Tool side effects are
never replayed.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import QuerySet

from . import history
from .events import ErrorEvent, StatusEvent
from .models import Conversation, Event

MESSAGE = "The server stopped while this prompt was running; what it produced is kept."


def interrupt(conversations: QuerySet[Conversation]) -> int:
    count = 0
    for conversation_id in conversations.values_list("id", flat=True):
        with transaction.atomic():
            conversation = (
                Conversation.objects.select_for_update()
                .filter(id=conversation_id, state=Conversation.State.RUNNING)
                .first()
            )
            if conversation is None:
                continue
            seq = conversation.last_seq
            closing = [
                ErrorEvent(seq=seq + 1, message=MESSAGE, code="interrupted"),
                StatusEvent(seq=seq + 2, state="error", message="Interrupted"),
            ]
            Event.objects.bulk_create(
                Event(conversation=conversation, seq=e.seq, type=e.type, payload=e.to_dict())
                for e in closing
            )
            conversation.history = history.repair(conversation.history, "the server stopped")
            conversation.last_seq = seq + 2
            conversation.state = Conversation.State.INTERRUPTED
            conversation.save(update_fields=["history", "last_seq", "state", "updated"])
            count += 1
    return count
