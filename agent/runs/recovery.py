"""Runs whose process died: mark them interrupted, keep what they produced.

A run holds a lease that its process renews; when the lease has lapsed (the process was
killed, the machine rebooted) the conversation is marked interrupted: the partial text that
was streaming becomes a text event, the history is repaired (a tool call without a result
gets an error result, the partial text is kept) so the next prompt works, and the
transcript gets an error and a final status. Prompts still queued on the run are dropped
as not sent (an ``unqueued`` each, their text kept in the log and shown).
Tool side effects are never replayed. Any
process may do this; the row lock makes it happen once.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from agent.core import history
from agent.core.events import ErrorEvent, StatusEvent, TextDeltaEvent, TextEvent, UnqueuedEvent
from agent.core.events import Event as CoreEvent
from agent.models import Conversation, Event
from agent.runs.eventlog import from_stored, queue_events
from agent.ui.transcript import Transcript

MESSAGE = "The server stopped while this prompt was running; what it produced is kept."
# Text deltas are broadcast at once but stored at most once a second, so the dead process
# may have handed out seqs beyond last_seq. Seqs are never reused: recovery continues far
# past any it can have sent (pages see the jump as a gap and fetch the rest).
SEQ_SKIP = 10_000


def expired() -> QuerySet[Conversation]:
    return Conversation.objects.filter(state=Conversation.State.RUNNING).filter(
        Q(lease_until__lt=timezone.now()) | Q(lease_until__isnull=True)
    )


def interrupt(
    conversations: QuerySet[Conversation], *, only_expired: bool = True
) -> list[tuple[Conversation, list[CoreEvent]]]:
    """Interrupt the given running conversations; returns each with the events it got."""
    done = []
    for conversation_id in conversations.values_list("id", flat=True):
        with transaction.atomic():
            rows = Conversation.objects.select_for_update().filter(
                id=conversation_id, state=Conversation.State.RUNNING
            )
            if only_expired:
                rows = rows.filter(Q(lease_until__lt=timezone.now()) | Q(lease_until__isnull=True))
            conversation = rows.first()
            if conversation is None:
                continue  # finished, or another process got here first
            done.append((conversation, _close(conversation)))
    return done


def _still_queued(conversation: Conversation) -> list[str]:
    """The ids of the prompts queued on the dead run and never delivered nor removed. The
    queue's events are kept on the instance (``queue_events``) for the announcement, which
    shows these prompts' text as not sent."""
    conversation.queue_events = queue_events(conversation.id)
    transcript = Transcript()
    for event in conversation.queue_events:
        transcript.fold_queue(event)
    return [item.id for item in transcript.queued]


def _close(conversation: Conversation) -> list[CoreEvent]:
    deltas = Event.objects.filter(conversation=conversation, type=TextDeltaEvent.type)
    live = Transcript.of(from_stored(deltas.order_by("seq").values_list("payload", flat=True))).live
    partial = live.content if live else ""
    seq = conversation.last_seq + SEQ_SKIP
    closing: list[CoreEvent] = []
    if partial:
        closing.append(TextEvent(seq=seq + 1, content=partial))
    for queue_id in _still_queued(conversation):
        closing.append(UnqueuedEvent(seq=seq + len(closing) + 1, id=queue_id, reason="not_sent"))
    closing += [
        ErrorEvent(seq=seq + len(closing) + 1, message=MESSAGE, code="interrupted"),
        StatusEvent(seq=seq + len(closing) + 2, state="error", message="Interrupted"),
    ]
    deltas.delete()
    Event.objects.bulk_create(
        Event(conversation=conversation, seq=e.seq, type=e.type, payload=e.to_dict())
        for e in closing
    )
    messages = history.repair(conversation.history, "the server stopped before it finished")
    if partial:
        if messages and messages[-1]["role"] == "assistant":
            messages[-1] = {
                **messages[-1],
                "content": [*messages[-1]["content"], {"type": "text", "text": partial}],
            }
        elif messages:
            messages.append({"role": "assistant", "content": [{"type": "text", "text": partial}]})
    conversation.history = messages
    conversation.last_seq = closing[-1].seq
    conversation.state = Conversation.State.INTERRUPTED
    conversation.lease_owner, conversation.lease_until = "", None
    conversation.save(update_fields=["history", "last_seq", "state", "lease_owner",
                                     "lease_until", "updated"])  # fmt: skip
    return closing
