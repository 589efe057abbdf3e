"""This process's receiver of the live batches: it hands each batch to the conversation's
listeners here, its sockets' subscription (agent/web/viewers.py) and its API event streams
(agent/web/feed.py's ``ChannelInbox``). None of them waits: a stream's queue takes it; the
subscription renders it at once when it can, else queues it for its own task.

This process's runs hand it each batch as they write it (agent/runs/broadcast.py's
``receive_here``). With ``REDIS_URL`` it also reads, on one channel in the group every
process's receiver joins (``LIVE_GROUP``), every other process's batches (skipping its own
process's, had already) and keeps those of the conversations watched here.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import threading
import uuid
from collections.abc import AsyncIterator, Callable

from channels.layers import get_channel_layer

from agent.runs.broadcast import (
    LIVE_GROUP,
    crosses_processes,
    decode,
    process_token,
    receive_here,
    stop_receiving,
)

log = logging.getLogger(__name__)

Listener = Callable[[dict], None]  # takes the batch now; waits for nothing


def key(conversation_id) -> str:
    return _canonical(str(conversation_id))


@functools.lru_cache(maxsize=4096)
def _canonical(text: str) -> str:
    """The id's one spelling. Every batch is looked up by it: remembered, not parsed again
    (parsing and printing a UUID per batch was about 1% of a busy process's CPU)."""
    return str(uuid.UUID(text))


async def received(layer, channel: str, what: str) -> AsyncIterator[dict]:
    """Every message of ``channel``, for as long as the caller's task runs; an outage of the
    layer is logged and waited out (the pages re-sync by seq when it is back)."""
    while True:
        try:
            message = await layer.receive(channel)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s could not be received", what)
            await asyncio.sleep(1)
            continue
        yield message


class Dispatcher:
    def __init__(self, layer=None) -> None:
        self.layer = layer or get_channel_layer()
        # conversation -> its listeners here: its sockets' subscription, its event streams
        self.listeners: dict[str, set[Listener]] = {}
        self.channel: str | None = None
        self.tasks: list[asyncio.Task] = []  # (held: the loop keeps only weak references)
        self.receiving = False  # this process's own batches come to ``hand_out``
        self.started = False
        self.starting = asyncio.Lock()
        self.failures = 0  # starts that failed, and the last one's error
        self.failure: Exception | None = None

    async def start(self) -> None:
        """Receives from now on. Callers that waited for a start that failed (Redis
        unreachable) share its failure rather than each waiting for a try of its own; the
        next caller tries again. This process's own batches are received already."""
        if self.started:
            return
        waited_for = self.failures
        async with self.starting:
            if self.started:
                return
            if self.failures != waited_for and self.failure is not None:
                raise self.failure
            try:
                await self._start()
            except Exception as exc:
                self.failures, self.failure = self.failures + 1, exc
                raise

    async def _start(self) -> None:
        if not self.receiving:
            receive_here(self.hand_out)
            self.receiving = True
        if crosses_processes(self.layer):
            channel = await self.layer.new_channel()
            try:
                await self.layer.group_add(LIVE_GROUP, channel)
            except BaseException:
                # (it may have joined before the error: no member that no one reads)
                with contextlib.suppress(Exception):
                    await self.layer.group_discard(LIVE_GROUP, channel)
                raise
            self.channel = channel
            # A context of its own: it serves every conversation of the process.
            loop = asyncio.get_running_loop()
            self.tasks.append(loop.create_task(self._from_other_processes(),
                                               context=contextvars.Context()))  # fmt: skip
        self.started = True

    async def leave(self) -> None:
        """Its loop is closed (its tasks with it): nothing is handed to it any more."""
        stop_receiving(self.hand_out)
        if self.channel is not None:
            await self.layer.group_discard(LIVE_GROUP, self.channel)

    async def _from_other_processes(self) -> None:
        here = process_token()
        async for message in received(self.layer, self.channel, "the live batches"):
            if message.get("origin") == here:
                continue  # handed to this receiver directly
            try:
                batches = decode(message)
            except (KeyError, TypeError, ValueError):  # (another version's, in a deploy)
                log.exception("a live message could not be read")
                continue
            self.hand_out(batches)

    def hand_out(self, batches: list[dict]) -> None:
        for batch in batches:
            self._hand_out(batch)

    def _hand_out(self, batch: dict) -> None:
        try:
            for listener in list(self.listeners.get(key(batch["conversation"]), ())):
                listener(batch)
        except Exception:  # that conversation's pages catch up from the event log
            log.exception("could not hand out a live batch")

    def add(self, conversation_id, listener: Listener) -> None:
        self.listeners.setdefault(key(conversation_id), set()).add(listener)

    def drop(self, conversation_id, listener: Listener) -> None:
        listeners = self.listeners.get(key(conversation_id))
        if listeners is not None:
            listeners.discard(listener)
            if not listeners:
                del self.listeners[key(conversation_id)]


# One per event loop: a server has one; tests and ``async_to_sync`` make many.
_dispatchers: dict[asyncio.AbstractEventLoop, Dispatcher] = {}
_lock = threading.Lock()


async def dispatcher() -> Dispatcher:
    """The running loop's dispatcher, receiving from the first call on."""
    loop = asyncio.get_running_loop()
    with _lock:
        gone = [other for other in _dispatchers if other.is_closed()]
        stale = [_dispatchers.pop(other) for other in gone]
        found = _dispatchers.get(loop)
        if found is None:
            found = _dispatchers[loop] = Dispatcher()
    for old in stale:  # a closed loop's receiver no longer reads: out of the group
        await old.leave()
    await found.start()
    return found
