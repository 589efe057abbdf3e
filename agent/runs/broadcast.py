"""Persisted batches out to every socket and stream on a conversation.

The edge of the run layer towards the channel layer: typed events become their wire JSON
here (the SSE stream forwards them as they are), beside the HTML the page applies.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from agent.core.events import Event
from agent.models import Conversation
from agent.runs.eventlog import wire
from agent.runs.groups import group_name
from agent.runs.recovery import interrupt
from agent.ui.fragments import FragmentRenderer, sync_marker

log = logging.getLogger(__name__)


async def broadcast(conversation_id, events: list[Event], html: str, branch: int = 0) -> None:
    """Send a persisted batch to every socket and stream on the conversation, with its seq
    range (pages apply it only where it continues what they have)."""
    first, last = events[0].seq, events[-1].seq
    await get_channel_layer().group_send(group_name(conversation_id), {
        "type": "conversation.batch",
        "seq_from": first,
        "seq_to": last,
        "html": sync_marker(first, last) + html,
        "events": wire(events, branch),
    })  # fmt: skip


async def announce_branch(conversation_id, active: int, fork_seq: int,
                          events: list[dict] | None = None) -> None:  # fmt: skip
    """The conversation now shows another branch (interfaces §11): pages re-draw their
    transcript; streams get ``branch {active, fork_seq}`` and the new path's events after
    ``fork_seq`` (``events``: their JSON; none yet for a branch just started)."""
    await get_channel_layer().group_send(group_name(conversation_id), {
        "type": "conversation.branch",
        "active": active,
        "fork_seq": fork_seq,
        "events": events or [],
    })  # fmt: skip


async def announce_interrupted(done: list[tuple[Conversation, list[Event]]]) -> None:
    for conversation, events in done:
        renderer = FragmentRenderer()
        renderer.live = True  # pages may hold the dead run's live block: replace it
        # Prompts dropped from the dead run's queue are shown as not sent, with their text
        # (agent/runs/recovery.py keeps the queue's events on the instance).
        for event in getattr(conversation, "queue_events", ()):
            renderer.transcript.fold_queue(event)
        await broadcast(conversation.id, events, renderer.render(events, conversation))


def interrupt_and_announce(queryset) -> None:
    """For synchronous callers (views): interrupt dead runs and tell open pages."""
    done = interrupt(queryset)
    if done:
        try:
            async_to_sync(announce_interrupted)(done)
        except Exception:
            log.exception("could not announce interrupted runs")
