"""This process's sockets on a conversation, fed by one subscription: the conversation's
group is joined once per process, not once per socket.

A streamed batch reaches each process that has a socket on the conversation once (through
this process's receiver, agent/web/dispatch.py; from another process, one Redis PUBLISH
with ``REDIS_URL``), and so does a branch switch, in line with the batches. ``Viewers``
renders the batch once (agent/web/live_frames.py) and puts it, with its fragments, into
each socket's feed (agent/web/feed.py's ``QueueInbox``), which the socket reads in order:
one render per process, not one per socket. A stream's next deltas are rendered as they
come; what must wait for its fragments (a rebuild, the render worker) queues for the
subscription's task, and whatever comes after it queues behind it. The conversation's
group (joined through the channel layer's public ``new_channel``/``group_add``/``receive``)
brings its other messages: those the feed takes (a re-check, a deletion) go into the feeds
the same way, in the order they came; any other is sent to the socket's own channel, where
Channels hands it to its consumer. The sockets join their user's and session's groups
themselves: those messages reach each socket through its own channel, and its consumer puts
them into its feed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Protocol

from channels.layers import get_channel_layer

from agent.runs.groups import group_name
from agent.web import dispatch
from agent.web.feed import BATCH, KINDS, Arrivals, QueueInbox
from agent.web.live_frames import LiveFrames

log = logging.getLogger(__name__)


class Viewer(Protocol):
    channel_name: str
    inbox: QueueInbox


class Viewers:
    """The sockets of this process on one conversation, and the task that feeds them: its
    own, so a conversation whose frame waits (a rebuild from the log, a long answer
    rendered in the worker) holds up no other conversation's."""

    def __init__(self, conversation_id) -> None:
        self.conversation_id = conversation_id
        self.sockets: dict[str, Viewer] = {}
        self.layer = get_channel_layer()
        self.channel: str | None = None
        self.messages = Arrivals()  # from either source, in order
        self.tasks: list[asyncio.Task] = []
        self.ready = asyncio.Event()
        self.frames = LiveFrames(conversation_id)
        self.dispatcher: dispatch.Dispatcher | None = None
        self.busy = False  # the task is handing a message out

    async def start(self) -> None:
        # The batches come through this process's receiver (agent/web/dispatch.py); the
        # conversation's other messages through its group; both into one queue.
        self.dispatcher = await dispatch.dispatcher()
        self.channel = await self.layer.new_channel()
        await self.layer.group_add(group_name(self.conversation_id), self.channel)
        # Last: a start that failed above leaves no listener behind, feeding no one.
        self.dispatcher.add(self.conversation_id, self.take)
        what = f"the live feed of {self.conversation_id}"
        self.tasks = [asyncio.create_task(self.messages.read(self.layer, self.channel, what)),
                      asyncio.create_task(self._hand_out())]  # fmt: skip
        self.ready.set()

    async def stop(self) -> None:
        await self.ready.wait()
        if self.dispatcher is not None:
            self.dispatcher.drop(self.conversation_id, self.take)
        for task in self.tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._leave_group()

    async def _leave_group(self) -> None:
        if self.channel is not None:
            await self.layer.group_discard(group_name(self.conversation_id), self.channel)

    def take(self, message: dict) -> None:
        """A message from this process's receiver. A batch that nothing of this conversation
        waits before, and whose fragments need nothing awaited (most of a stream's), goes
        to the sockets at once: under load each trip through the task's queue costs a turn
        of the event loop. The others queue for the task, in order."""
        if not self.busy and self.messages.queue.empty() and message.get("type") == BATCH:
            try:
                html = self.frames.render_now(message)
            except Exception:  # the pages see a gap, and catch up from the event log
                log.exception("could not render a batch of %s", self.conversation_id)
                return
            if html is not None:
                self._to_feeds({**message, "html": html})
                return
        self.messages.put(message)

    async def _hand_out(self) -> None:
        while True:
            message = await self.messages.get()
            self.busy = True
            try:
                await self._hand_out_now(message)
            finally:
                self.busy = False

    async def _hand_out_now(self, message: dict) -> None:
        kind = message.get("type")
        if kind == BATCH:
            try:
                message = {**message, "html": await self.frames.render(message)}
            except Exception:  # the pages see a gap, and catch up from the event log
                log.exception("could not render a batch of %s", self.conversation_id)
                return
        if kind in KINDS:
            self._to_feeds(message)
            return
        for channel in list(self.sockets):
            try:
                await self.layer.send(channel, message)
            except Exception:  # that socket's own task meets its error; the others go on
                log.exception("a socket of %s could not take a message", self.conversation_id)

    def _to_feeds(self, message: dict) -> None:
        for socket in list(self.sockets.values()):
            socket.inbox.put(message)  # read by the socket's feed, in order


# Per event loop: a server has one; tests and ``async_to_sync`` make many.
_watched: dict[asyncio.AbstractEventLoop, dict[str, Viewers]] = {}
_lock = threading.Lock()


def _of_loop() -> dict[str, Viewers]:
    loop = asyncio.get_running_loop()
    with _lock:
        for closed in [other for other in _watched if other.is_closed()]:
            del _watched[closed]
        return _watched.setdefault(loop, {})


async def join(conversation_id, socket: Viewer) -> None:
    """The socket gets the conversation's frames from now on."""
    watched = _of_loop()
    key = str(conversation_id)
    viewers = watched.get(key)
    if viewers is None:
        viewers = watched[key] = Viewers(conversation_id)
        viewers.sockets[socket.channel_name] = socket
        try:
            await viewers.start()
        except BaseException:
            if watched.get(key) is viewers:
                del watched[key]
            viewers.ready.set()  # the sockets that joined meanwhile are not kept waiting
            raise
        return
    viewers.sockets[socket.channel_name] = socket
    await viewers.ready.wait()  # joined the group: nothing sent from now on is missed


async def leave(conversation_id, socket: Viewer) -> None:
    """The socket gets no more frames; the last one of the process ends the subscription."""
    watched = _of_loop()
    key = str(conversation_id)
    viewers = watched.get(key)
    if viewers is None or viewers.sockets.pop(socket.channel_name, None) is None:
        return
    if not viewers.sockets:
        del watched[key]  # a socket joining from now on starts a subscription of its own
        await viewers.stop()
