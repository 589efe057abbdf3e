"""This process's receiver of the live batches: one channel in the group every process's
receiver joins (``LIVE_GROUP``), one task that hands each batch to the conversation's
listeners here: its sockets' subscription (agent/web/viewers.py) and its API event
streams (agent/web/feed.py's ``ChannelInbox``, through their own channels).

Runs send their batches together (agent/runs/broadcast.py: the batches written in one turn
of a process's event loop are one group message), so under load a frame costs a share of
one channel-layer message, not one each: Channels' in-memory layer sweeps every channel
and group membership on each group send and receive, a cost that grows with the open
sockets. With ``REDIS_URL`` each process receives every process's batches and keeps those
of the conversations watched here.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

from channels.layers import get_channel_layer

from agent.runs.broadcast import LIVE_GROUP, decode

log = logging.getLogger(__name__)

Listener = Callable[[dict], Awaitable[None]]


def key(conversation_id) -> str:
    return str(uuid.UUID(str(conversation_id)))


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
    def __init__(self) -> None:
        self.layer = get_channel_layer()
        self.listeners: dict[str, Listener] = {}  # conversation -> its sockets' feed
        self.streams: dict[str, set[str]] = {}  # conversation -> event streams' channels
        self.channel: str | None = None
        self.task: asyncio.Task | None = None
        self.ready: asyncio.Event | None = None

    async def start(self) -> None:
        if self.ready is not None:
            await self.ready.wait()
            return
        self.ready = asyncio.Event()
        try:
            self.channel = await self.layer.new_channel()
            await self.layer.group_add(LIVE_GROUP, self.channel)
            # A context of its own: it serves every conversation of the process.
            self.task = asyncio.get_running_loop().create_task(
                self._forward(), context=contextvars.Context()
            )
        finally:
            self.ready.set()

    async def _forward(self) -> None:
        async for message in received(self.layer, self.channel, "the live batches"):
            try:
                batches = decode(message)
            except (KeyError, TypeError, ValueError):  # (another version's, in a deploy)
                log.exception("a live message could not be read")
                continue
            for batch in batches:
                await self._hand_out(batch)

    async def _hand_out(self, batch: dict) -> None:
        conversation = key(batch["conversation"])
        listener = self.listeners.get(conversation)
        try:
            if listener is not None:
                await listener(batch)
            for channel in list(self.streams.get(conversation, ())):
                await self.layer.send(channel, batch)
        except Exception:  # that conversation's pages catch up from the event log
            log.exception("could not hand out a batch of %s", conversation)

    def add_stream(self, conversation_id, channel: str) -> None:
        self.streams.setdefault(key(conversation_id), set()).add(channel)

    def drop_stream(self, conversation_id, channel: str) -> None:
        channels = self.streams.get(key(conversation_id))
        if channels is not None:
            channels.discard(channel)
            if not channels:
                del self.streams[key(conversation_id)]


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
        if old.channel is not None:
            await old.layer.group_discard(LIVE_GROUP, old.channel)
    await found.start()
    return found
