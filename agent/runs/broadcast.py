"""Persisted batches out to every socket and stream on a conversation: their events.

The edge of the run layer towards the channel layer: typed events become their wire JSON
here. Each listening process renders them for its pages (agent/web/live_frames.py), and the
API's event streams send them as they are.

Each batch is handed to this process's receivers (``receive_here``: agent/web/dispatch.py,
which hands it to that conversation's listeners) as it is written, before ``broadcast``
returns: under load every trip through the event loop's queue costs a full turn of the
loop, so the path from a run to its pages takes as few as it can. When the channel layer
reaches other processes (Redis), the batches of every run of this process written in one
turn of its event loop also go out as one message to ``LIVE_GROUP``, which every other
process's receiver reads (a message costs the same with one batch or fifty); a receiver
skips its own process's message, which it has had already. A process's own pages never
wait on the layer (Channels' in-memory layer sweeps every channel and group on each send
and receive: 9% of the event loop at 100 streams, profiled). A conversation's batches keep
their order: handed here in the order written, and one sender per process to the layer.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import os
import threading
import uuid
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from agent.core.events import Event
from agent.models import Conversation
from agent.runs.eventlog import SHOWN, wire
from agent.runs.recovery import interrupt

log = logging.getLogger(__name__)

LIVE_GROUP = "live.batches"  # every process's receiver of the live batches
_lock = threading.Lock()

Receiver = Callable[[list[dict[str, Any]]], None]
# This process's receivers, by their event loop (a server has one; tests and
# ``async_to_sync`` make more): each is called on its own loop.
_receivers: dict[asyncio.AbstractEventLoop, list[Receiver]] = {}
_process: tuple[int, str] = (0, "")


def process_token() -> str:
    """Names this process's messages on the layer (new in a forked child)."""
    global _process
    if _process[0] != os.getpid():
        _process = (os.getpid(), uuid.uuid4().hex)
    return _process[1]


def crosses_processes(layer) -> bool:
    """Whether the layer carries messages to other processes (Channels' in-memory one
    does not: this process's receivers have every batch already)."""
    return not isinstance(layer, InMemoryChannelLayer)


def receive_here(receiver: Receiver) -> None:
    """``receiver`` gets, on the running loop, every list of batches this process sends."""
    with _lock:
        _receivers.setdefault(asyncio.get_running_loop(), []).append(receiver)


def stop_receiving(receiver: Receiver) -> None:
    with _lock:
        for loop, found in list(_receivers.items()):
            if receiver in found:
                found.remove(receiver)
            if not found:
                del _receivers[loop]


def _hand_here(batches: list[dict[str, Any]]) -> None:
    """To each receiver of this process: the running loop's at once, another loop's through
    that loop, as a copy of its own (no two loops share a dict)."""
    here = asyncio.get_running_loop()
    with _lock:
        for closed in [loop for loop in _receivers if loop.is_closed()]:
            del _receivers[closed]
        receivers = [(loop, receiver) for loop, found in _receivers.items() for receiver in found]
    for loop, receiver in receivers:
        if loop is here:
            try:
                receiver(batches)
            except Exception:  # that receiver's pages catch up from the event log
                log.exception("a receiver could not take %d live batches", len(batches))
            continue
        with contextlib.suppress(RuntimeError):  # (closed meanwhile)
            loop.call_soon_threadsafe(receiver, json.loads(encode(batches)))


def shown(conversation: Conversation) -> dict[str, Any]:
    """``SHOWN`` of the conversation, as the layer carries them (the cost as a string)."""
    values = {name: getattr(conversation, name) for name in SHOWN}
    values["cost_usd"] = str(values["cost_usd"])
    values["project_id"] = str(values["project_id"] or "")
    return values


class _Outbox:
    """The batches this event loop's runs wrote and not yet sent to the other processes;
    one sender at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: list[tuple[dict[str, Any], asyncio.Future]] = []
        self.sending: asyncio.Task | None = None

    def add(self, batch: dict[str, Any]) -> asyncio.Future:
        sent = self.loop.create_future()
        self.pending.append((batch, sent))
        if self.sending is None:
            self.sending = self.loop.create_task(self._send(), context=contextvars.Context())
        return sent

    async def _send(self) -> None:
        try:
            while self.pending:
                await asyncio.sleep(0)  # the other runs' batches of this turn join in
                taken, self.pending = self.pending, []
                batches = [b for b, _ in taken]
                try:
                    message = {"type": "live.batches", "origin": process_token(),
                               "batches": encode(batches)}  # fmt: skip
                    await get_channel_layer().group_send(LIVE_GROUP, message)
                except Exception:  # the pages see a gap and catch up from the event log
                    log.exception("could not send %d live batches", len(taken))
                    for _, sent in taken:
                        if not sent.done():
                            sent.set_result(None)
                    continue
                for _, sent in taken:
                    if not sent.done():
                        sent.set_result(None)
        finally:
            self.sending = None


def encode(batches: list[dict[str, Any]]) -> str:
    """A message's batches as one JSON string: the Redis layer carries it as it is, where
    it would pack the events' nested dicts one by one."""
    return json.dumps(batches, separators=(",", ":"))


def decode(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The batches of a ``live.batches`` message."""
    return json.loads(message["batches"])


_outboxes: dict[asyncio.AbstractEventLoop, _Outbox] = {}


def _send(batch: dict[str, Any]) -> None:
    """Here at once; to the other processes with this turn's other batches. A failure is
    logged, never raised into the run's writer: the pages see a gap and catch up from the
    event log."""
    try:
        _hand_here([batch])
        if crosses_processes(get_channel_layer()):
            _outbox().add(batch)
    except Exception:
        log.exception("could not send a live batch of %s", batch.get("conversation"))


def _outbox() -> _Outbox:
    loop = asyncio.get_running_loop()
    with _lock:
        found = _outboxes.get(loop)
        if found is None:
            for closed in [other for other in _outboxes if other.is_closed()]:
                del _outboxes[closed]
            found = _outboxes[loop] = _Outbox(loop)
    return found


async def broadcast(conversation_id, events: list[Event], branch: int = 0, *, run: int,
                    conversation: Conversation | None = None, title: bool = False,
                    **extra: Any) -> None:  # fmt: skip
    """Send a persisted batch to every socket and stream on the conversation, with its seq
    range (pages apply it only where it continues what they have), the run's first seq
    (``run``: where its rendering starts), the figures pages show and whether the title
    changed. This process's listeners have it when this returns; other processes get it
    with the other batches of this turn of the loop, and ``flushed`` waits for that (a
    run's writer goes on meanwhile: the sender logs a failure, the pages catch up)."""
    batch = {
        "type": "conversation.batch",
        "conversation": str(conversation_id),
        "seq_from": events[0].seq,
        "seq_to": events[-1].seq,
        "events": wire(events, branch),
        "run": run,
        **extra,
    }
    if conversation is not None:
        batch["shown"] = shown(conversation)
    if title:
        batch["title"] = True
    _send(batch)


async def flushed() -> None:
    """Returns once the batches this loop has broadcast so far are sent to the other
    processes (a caller whose loop ends next: ``async_to_sync``)."""
    outbox = _outbox()
    if outbox.pending:
        await asyncio.gather(*(sent for _, sent in outbox.pending), return_exceptions=True)
    elif outbox.sending is not None:
        await asyncio.shield(outbox.sending)


async def announce_branch(conversation_id, active: int, fork_seq: int,
                          events: list[dict] | None = None) -> None:  # fmt: skip
    """The conversation now shows another branch (docs/API.md, branches): pages re-draw their
    transcript; streams get ``branch {active, fork_seq}`` and the new path's events after
    ``fork_seq`` (``events``: their JSON; none yet for a branch just started). It goes the
    batches' way, in line with them: the new branch's first frames never overtake it."""
    _send({
        "type": "conversation.branch",
        "conversation": str(conversation_id),
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
    await flushed()


def interrupt_and_announce(queryset) -> None:
    """For synchronous callers (views): interrupt dead runs and tell open pages."""
    done = interrupt(queryset)
    if done:
        try:
            async_to_sync(announce_interrupted)(done)
        except Exception:
            log.exception("could not announce interrupted runs")
