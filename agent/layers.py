"""The in-process channel layer (the embedded default when ``REDIS_URL`` is not set).

Channels' ``InMemoryChannelLayer`` sweeps every channel and every group membership for
expired entries on each receive and each group send, deep-copies every message per
recipient and starts a task per recipient. With hundreds of open sockets that makes each
streamed frame cost O(sockets): the benchmark's profile showed the sweep alone as the
largest single item. This layer keeps the same semantics (capacity, expiry, groups) with
the sweep done at most once a second and group sends as direct queue puts.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer

SWEEP_INTERVAL = 1.0


class LocalChannelLayer(InMemoryChannelLayer):
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
            with contextlib.suppress(asyncio.QueueFull):  # a full channel drops, as upstream
                self._put(channel, message)
