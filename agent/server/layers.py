"""The channel layers: in-process (the embedded default when ``REDIS_URL`` is not set), and
Redis for several processes (``RedisLayer``, below).

The in-process layer:

Channels' ``InMemoryChannelLayer`` sweeps every channel and every group membership for
expired entries on each receive and each group send, deep-copies every message per
recipient and starts a task per recipient. With hundreds of open sockets that makes each
streamed frame cost O(sockets): the benchmark's profile showed the sweep alone as the
largest single item. This layer keeps the same semantics (capacity, expiry, groups) with
the sweep done at most once a second and group sends as direct queue puts.

Both layers hand a group's message straight to a socket of this process that attached a
sink (``attach``, the browser's consumer: agent/web/consumers.py), when the socket is idle
and nothing waits in its queue: the frame is written to the socket in the sender's task,
with no queue, no wake-up of the socket's task, no serialisation. A busy socket, or one with
messages queued, gets the message queued as before, so every socket still sees its messages
in the order they were sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer, RedisPubSubLoopLayer
from channels_redis.utils import _wrap_close

log = logging.getLogger(__name__)

SWEEP_INTERVAL = 1.0

# A socket's sink: takes a message now (True) or declines it (False: it is queued instead).
Sink = Callable[[dict], Awaitable[bool]]


class DirectSinks:
    """The sockets of this process that take messages directly (a mixin for both layers)."""

    _sinks: dict[str, Sink] | None = None  # channel -> sink (made by the first attach)

    def attach(self, channel: str, sink: Sink) -> None:
        if self._sinks is None:
            self._sinks = {}
        self._sinks[channel] = sink

    def detach(self, channel: str) -> None:
        if self._sinks is not None:
            self._sinks.pop(channel, None)

    async def _hand_over(self, channel: str, message: dict) -> bool:
        """True when the channel's socket took the message itself. A sink must not pause
        (Daphne's send does not): the sender waits for it, and a message sent meanwhile
        could reach another socket of the group first."""
        sink = self._sinks.get(channel) if self._sinks else None
        if sink is None:
            return False
        queue = self.channels.get(channel)
        if queue is None or not queue.empty():
            # Older messages first. No queue: nobody is receiving on the channel (its
            # socket is between two receives, or its task ended): queued, the message
            # expires like any other for a channel no one reads.
            return False
        try:
            return await sink(message)
        except Exception:  # queued instead: the socket's own task meets the error, as before
            log.exception("a socket could not take a frame directly")
            return False


class LocalChannelLayer(DirectSinks, InMemoryChannelLayer):
    _swept = 0.0

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self._swept >= SWEEP_INTERVAL:
            self._swept = now
            super()._clean_expired()

    async def send(self, channel: str, message: dict) -> None:
        assert isinstance(message, dict), "message is not a dict"
        self.require_valid_channel_name(channel)
        try:
            self._put(channel, message)
        except asyncio.QueueFull:
            raise ChannelFull(channel) from None

    def _put(self, channel: str, message: dict) -> None:
        queue = self.channels.get(channel)
        if queue is None:
            queue = self.channels[channel] = asyncio.Queue(maxsize=self.get_capacity(channel))
        # A shallow copy: receivers get their own dict; the values (strings, the event
        # list) are never mutated by this project's consumers.
        queue.put_nowait((time.time() + self.expiry, dict(message)))

    async def group_send(self, group: str, message: dict) -> None:
        assert isinstance(message, dict), "Message is not a dict"
        self.require_valid_group_name(group)
        self._clean_expired()
        for channel in list(self.groups.get(group, ())):
            if await self._hand_over(channel, message):
                continue
            with contextlib.suppress(asyncio.QueueFull):  # a full channel drops, as upstream
                self._put(channel, message)


# -- Redis (REDIS_URL): several processes -----------------------------------------------------
PEERS_TTL = 10.0  # seconds a cached "who else listens to this group" answer is trusted


class RedisLayer(RedisPubSubChannelLayer):
    """channels-redis's pub/sub layer, local first: a group send reaches this process's
    members with queue puts and goes through Redis only when another process has members
    in the group.

    channels-redis's core layer costs a Redis round trip per message per socket and pops
    each process's messages one at a time: at 250 streaming sessions it fell 12 s behind
    and dropped frames. Its pub/sub layer publishes every group message (under a lock, one
    round trip each) and reads it back through the subscription, even when the only
    listener is the sender. Here a socket and the run it watches usually live in the same
    process, so the common frame costs no Redis call at all; a group shared with another
    process (a second tab, an API stream there) is published, and then only published, so
    Redis delivers it to every process once, this one included.

    Who else listens is Redis's own subscriber count (``PUBSUB NUMSUB``), cached per
    group; a process that joins or leaves a group announces it on a membership channel and
    every process drops its cached count. A frame sent in the instant between a join and
    its announcement can miss the new member, and when a group stops being shared a local
    frame can overtake one still on its way through Redis; pages and API streams detect
    both by seq and fill the gap from the event log. The cache also expires after
    ``PEERS_TTL``.
    """

    def _get_layer(self):
        loop = asyncio.get_running_loop()
        layer = self._layers.get(loop)
        if layer is None:
            layer = self._layers[loop] = _LocalFirstLoopLayer(
                *self._args, **self._kwargs, channel_layer=self
            )
            _wrap_close(self, loop)
        return layer

    async def release(self, channel: str) -> None:
        """Forget a channel this process made for a one-off use (the health check)."""
        await self._get_layer().release(channel)

    def attach(self, channel: str, sink: Sink) -> None:
        self._get_layer().attach(channel, sink)

    def detach(self, channel: str) -> None:
        self._get_layer().detach(channel)


class _LocalFirstLoopLayer(DirectSinks, RedisPubSubLoopLayer):
    # Reads the shard's Redis client and subscription set (channels-redis 4.3 internals,
    # pinned in pyproject.toml and checked at start-up by ``missing_internals``;
    # tests/deploy/test_services.py exercises them against Redis).
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._peers: dict[str, tuple[float, int]] = {}  # group channel -> (when, count)
        # group channel -> [counts being read, announcements seen meanwhile]: a count read
        # while its group's membership changed may predate the change
        self._asking: dict[str, list[int]] = {}
        self._membership = f"{self.prefix}__membership__"
        self._origin = uuid.uuid4().hex  # to tell our own announcements from others'
        self._watcher: asyncio.Task | None = None

    async def _watch_membership(self) -> None:
        if self._membership in self.channels and self._watcher and not self._watcher.done():
            return
        queue = self.channels[self._membership] = asyncio.Queue()
        self._watcher = asyncio.get_running_loop().create_task(self._forget_counts(queue))
        await self._get_shard(self._membership).subscribe(self._membership)

    async def _forget_counts(self, queue: asyncio.Queue) -> None:
        while True:
            notice = await queue.get()
            if isinstance(notice, bytes):
                notice = notice.decode()
            origin, _, name = notice.partition(" ")
            if origin == self._origin:
                continue  # ours: the cached count was dropped when we announced it
            self._peers.pop(name, None)
            if name in self._asking:
                self._asking[name][1] += 1

    async def _announce(self, group_channel: str) -> None:
        self._peers.pop(group_channel, None)
        notice = f"{self._origin} {group_channel}"
        await self._get_shard(self._membership).publish(self._membership, notice)

    async def _others_listen(self, group_channel: str) -> bool:
        now = time.monotonic()
        cached = self._peers.get(group_channel)
        if cached is None or now - cached[0] > PEERS_TTL:
            await self._watch_membership()
            shard = self._get_shard(group_channel)
            shard._ensure_redis()
            asking = self._asking.setdefault(group_channel, [0, 0])
            asking[0] += 1
            seen = asking[1]
            try:
                ((_, count),) = await shard._redis.pubsub_numsub(group_channel)
            finally:
                asking[0] -= 1
                if not asking[0]:
                    del self._asking[group_channel]
            count -= group_channel in shard._subscribed_to  # ourselves
            if asking[1] != seen:
                # A process joined or left this group while we asked: the count may
                # predate it. Not cached, and published (Redis delivers to whoever is there).
                return True
            if len(self._peers) > 10_000:
                self._peers = {k: v for k, v in self._peers.items() if now - v[0] <= PEERS_TTL}
            cached = self._peers[group_channel] = (now, count)
        return cached[1] > 0

    async def send(self, channel: str, message: dict) -> None:
        queue = self.channels.get(channel)
        if queue is None:
            await super().send(channel, message)  # another process's channel
        else:
            queue.put_nowait(self.channel_layer.serialize(message))

    async def group_add(self, group: str, channel: str) -> None:
        group_channel = self._get_group_channel_name(group)
        first = not self.groups.get(group_channel)
        await self._watch_membership()
        await super().group_add(group, channel)
        if first:
            await self._announce(group_channel)

    async def group_discard(self, group: str, channel: str) -> None:
        group_channel = self._get_group_channel_name(group)
        was_member = channel in self.groups.get(group_channel, ())
        await super().group_discard(group, channel)
        if was_member and group_channel not in self.groups:  # the last one here left
            await self._announce(group_channel)

    async def group_send(self, group: str, message: dict) -> None:
        group_channel = self._get_group_channel_name(group)
        if await self._others_listen(group_channel):
            data = self.channel_layer.serialize(message)
            await self._get_shard(group_channel).publish(group_channel, data)
            return  # Redis hands it to this process's members too
        data = None  # serialised once, for the first socket that queues it
        for channel in list(self.groups.get(group_channel, ())):
            if await self._hand_over(channel, message):
                continue
            queue = self.channels.get(channel)
            if queue is not None:
                if data is None:
                    data = self.channel_layer.serialize(message)
                queue.put_nowait(data)

    async def release(self, channel: str) -> None:
        if self.channels.pop(channel, None) is not None:
            await self._get_shard(channel).unsubscribe(channel)


# -- what RedisLayer reads of channels-redis, checked at start-up -----------------------------
# Private names: a release may drop or rename any of them. Without this check that would be
# an AttributeError in the middle of a group send, on the first frame a user streams.
INTERNALS = {
    "RedisPubSubChannelLayer instance": ("_args", "_kwargs", "_layers"),
    "RedisPubSubLoopLayer instance": (
        "prefix",
        "channels",
        "groups",
        "channel_layer",
        "_get_shard",
        "_get_group_channel_name",
    ),  # fmt: skip
    "RedisSingleShardConnection instance": (
        "_redis",
        "_subscribed_to",
        "_ensure_redis",
        "publish",
        "subscribe",
        "unsubscribe",
    ),  # fmt: skip
}


def missing_internals() -> list[str]:
    """The internals RedisLayer reads that this channels-redis lacks (empty: all there).
    Built without connecting: the layers and shards open Redis only when first used."""
    hosts = [{"address": "redis://127.0.0.1:1/0"}]
    layer = RedisPubSubChannelLayer(hosts=hosts)
    loop_layer = RedisPubSubLoopLayer(hosts=hosts, channel_layer=layer)
    objects = {
        "RedisPubSubChannelLayer instance": layer,
        "RedisPubSubLoopLayer instance": loop_layer,
        "RedisSingleShardConnection instance": loop_layer._get_shard("probe")
        if hasattr(type(loop_layer), "_get_shard")
        else None,
    }
    missing = []
    for where, names in INTERNALS.items():
        found = objects[where]
        for name in names:
            # vars() and the class, not hasattr(): the channel layer's __getattr__ forwards
            # unknown names to a per-loop layer, which needs a running event loop.
            if found is None or not (name in vars(found) or hasattr(type(found), name)):
                missing.append(f"{where}.{name}")
    return missing
