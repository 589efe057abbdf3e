"""Persisted batches out to every socket and stream on a conversation: their events.

The edge of the run layer towards the channel layer: typed events become their wire JSON
here. Each listening process renders them for its pages (agent/web/live_frames.py), and the
API's event streams send them as they are.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from agent.core.events import Event
from agent.models import Conversation
from agent.runs.eventlog import wire
from agent.runs.groups import group_name
from agent.runs.recovery import interrupt

log = logging.getLogger(__name__)

# The conversation's figures a page's live fragments show: the title, the meter.
SHOWN = ("title", "input_tokens", "output_tokens", "cache_read_input_tokens",
         "cache_creation_input_tokens", "cost_usd", "context_tokens", "context_window")  # fmt: skip


def shown(conversation: Conversation) -> dict[str, Any]:
    """``SHOWN`` of the conversation, as the layer carries them (the cost as a string)."""
    values = {name: getattr(conversation, name) for name in SHOWN}
    values["cost_usd"] = str(values["cost_usd"])
    return values


async def broadcast(conversation_id, events: list[Event], branch: int = 0, *, run: int,
                    conversation: Conversation | None = None, title: bool = False,
                    **extra: Any) -> None:  # fmt: skip
    """Send a persisted batch to every socket and stream on the conversation, with its seq
    range (pages apply it only where it continues what they have), the run's first seq
    (``run``: where its rendering starts), the figures pages show and whether the title
    changed."""
    message = {
        "type": "conversation.batch",
        "seq_from": events[0].seq,
        "seq_to": events[-1].seq,
        "events": wire(events, branch),
        "run": run,
        **extra,
    }
    if conversation is not None:
        message["shown"] = shown(conversation)
    if title:
        message["title"] = True
    await get_channel_layer().group_send(group_name(conversation_id), message)


async def announce_branch(conversation_id, active: int, fork_seq: int,
                          events: list[dict] | None = None) -> None:  # fmt: skip
    """The conversation now shows another branch (docs/API.md, branches): pages re-draw their
    transcript; streams get ``branch {active, fork_seq}`` and the new path's events after
    ``fork_seq`` (``events``: their JSON; none yet for a branch just started)."""
    await get_channel_layer().group_send(group_name(conversation_id), {
        "type": "conversation.branch",
        "active": active,
        "fork_seq": fork_seq,
        "events": events or [],
    })  # fmt: skip


async def announce_interrupted(done: list[tuple[Conversation, list[Event]]]) -> None:
    """Runs of a dead process, ended here: pages replace the run's live block and show the
    prompts dropped from its queue as not sent, with their text (agent/runs/recovery.py
    keeps the queue's events on the instance)."""
    for conversation, events in done:
        dropped = wire(list(getattr(conversation, "queue_events", ())))
        await broadcast(conversation.id, events, run=events[0].seq, conversation=conversation,
                        interrupted=True, dropped=dropped)  # fmt: skip


def interrupt_and_announce(queryset) -> None:
    """For synchronous callers (views): interrupt dead runs and tell open pages."""
    done = interrupt(queryset)
    if done:
        try:
            async_to_sync(announce_interrupted)(done)
        except Exception:
            log.exception("could not announce interrupted runs")
