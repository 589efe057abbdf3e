"""A conversation's events for one reader, as a stream: the stored ones after a seq, then
the live ones, with no gap and no duplicate, until the reader's access ends. The page's
socket (agent/web/consumers.py) and the API's event stream (agent/web/api_events.py) both
read it: the socket renders its items into fragments, the stream serialises them as SSE.

``ConversationFeed.items()`` reads the messages of an inbox that holds the conversation's
group and the reader's credential groups before the event log is read, so nothing falls
in between; it skips by seq what the reader has. A batch that does not continue what was
sent (a message lost by the layer) is preceded by what the log holds in between. A branch
switch yields ``Switched``, then the new path's events after the point where the paths
part; a feed of one named branch is not moved. The feed ends with ``Ended`` when the
credential is revoked or the conversation deleted (a message to one of its groups:
agent/web/revocation.py), when a re-check fails (on ``access.recheck`` and
``session.recheck``, at each heartbeat, and at most once a second while events flow:
agent/web/rechecks.py), or
when the conversation can no longer be read. ``None`` is yielded for a heartbeat: nothing
happened for ``heartbeat`` seconds.

Two inboxes: ``ChannelInbox``, a channel of its own (an event stream; its batches come
through this process's receiver of them, agent/web/dispatch.py), and ``QueueInbox``, fed
by this process's one subscription to the conversation (agent/web/viewers.py, which
renders each batch once for all the process's sockets) and by the socket's own channel.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from agent.core.events import BranchEvent, Event
from agent.runs.branches import resume_point
from agent.runs.groups import group_name
from agent.runs.snapshot import snapshot
from agent.web import dispatch
from agent.web.rechecks import Recheck
from agent.web.revocation import NOT_FOUND, SIGNED_OUT

ENDS = {"user.revoked": SIGNED_OUT, "token.revoked": SIGNED_OUT, "conversation.deleted": NOT_FOUND}
RECHECKS = frozenset({"access.recheck", "session.recheck"})  # sharing or a password changed
# The messages a feed takes (the rest of the conversation's group's go to a socket itself).
BATCH = "conversation.batch"  # a run's live events
KINDS = frozenset({*ENDS, *RECHECKS, BATCH, "conversation.branch"})


@dataclass
class Batch:
    """Live events: ``message`` is the broadcast batch (its seq range; from a socket's
    inbox, its fragments as ``html``), ``events`` those of it the reader had not got."""

    message: dict
    events: list[dict[str, Any]]

    def wire(self) -> list[dict[str, Any]]:
        return self.events


@dataclass
class Replayed:
    """Stored events after ``after``, as the log gave them (with the context a catch-up
    shows: agent/runs/snapshot.py), and the conversation they were read with."""

    after: int
    conversation: Any
    events: list[Event]

    def wire(self) -> list[dict[str, Any]]:
        return [e.to_dict() for e in self.events if e.seq > self.after]


@dataclass
class Rechecked:
    """The reader's access was read again and still holds (their role may have changed:
    a page re-draws what its role shows; a stream has nothing to send)."""

    def wire(self) -> list[dict[str, Any]]:
        return []


@dataclass
class Switched:
    """Another branch is shown: what follows ``fork_seq`` is replaced by ``events``."""

    active: int
    fork_seq: int
    events: list[dict[str, Any]] = field(default_factory=list)

    def wire(self) -> list[dict[str, Any]]:
        shown = BranchEvent(seq=self.fork_seq, active=self.active, fork_seq=self.fork_seq)
        return [shown.to_dict(), *self.events]


@dataclass
class Ended:
    reason: str  # NOT_FOUND or SIGNED_OUT (agent/web/revocation.py)


async def _within(getting: Coroutine[Any, Any, dict], timeout: float | None) -> dict | None:
    """The next message, or None when ``timeout`` seconds pass first (None: no limit)."""
    if timeout is None:
        return await getting
    try:
        return await asyncio.wait_for(getting, timeout)
    except TimeoutError:
        return None


class QueueInbox:
    """Messages handed in by this process (agent/web/viewers.py, the socket's consumer)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict] = asyncio.Queue()

    def put(self, message: dict) -> None:
        self.queue.put_nowait(message)

    def wake(self) -> None:
        """The feed reads its re-check's answer now, not at the next message."""
        self.put({"type": "feed.wake"})

    async def open(self) -> None:
        pass

    async def get(self, timeout: float | None) -> dict | None:
        return await _within(self.queue.get(), timeout)

    async def close(self) -> None:
        pass


class Arrivals:
    """Messages in the order they came, from this process's receiver of the live batches
    and from a channel. At most ``LAYER_CAPACITY`` batches wait, as on a channel of the
    layer: more are dropped (the reader fills the gap from the event log by seq). Other
    messages (a branch switch, a revocation) are never dropped."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict] = asyncio.Queue()
        self.batches = 0

    def put(self, message: dict) -> None:
        if message.get("type") == BATCH:
            if self.batches >= settings.LAYER_CAPACITY:
                return
            self.batches += 1
        self.queue.put_nowait(message)

    async def read(self, layer, channel: str, what: str) -> None:
        """Every message of ``channel`` into the queue, for as long as the caller's task
        runs."""
        async for message in dispatch.received(layer, channel, what):
            self.put(message)

    async def get(self) -> dict:
        message = await self.queue.get()
        if message.get("type") == BATCH:
            self.batches -= 1
        return message


class ChannelInbox:
    """A channel of its own in the conversation's group and ``groups``, read by a task of
    its own, and the batches of this process's receiver of them (agent/web/dispatch.py):
    both into one queue, in the order they came."""

    def __init__(self, conversation_id, groups: list[str]) -> None:
        self.conversation_id = conversation_id
        self.groups = [group_name(conversation_id), *groups]
        self.layer = get_channel_layer()
        self.channel: str | None = None
        self.dispatcher: dispatch.Dispatcher | None = None
        self.arrivals = Arrivals()
        # One receive, for the stream's life: cancelling a receive makes channels-redis's
        # pub/sub layer drop the channel (what arrives meanwhile would be lost).
        self.reading: asyncio.Task | None = None

    async def open(self) -> None:
        """Joined, read and listening; or, when any step fails (the layer unreachable),
        none of it: the groups left, the reading task ended."""
        try:
            self.channel = await self.layer.new_channel()
            for group in self.groups:
                await self.layer.group_add(group, self.channel)
            what = f"an event stream of {self.conversation_id}"
            self.reading = asyncio.create_task(self.arrivals.read(self.layer, self.channel, what))
            self.dispatcher = await dispatch.dispatcher()
            self.dispatcher.add(self.conversation_id, self.arrivals.put)
        except BaseException:
            await self.close()
            raise

    async def get(self, timeout: float | None) -> dict | None:
        return await _within(self.arrivals.get(), timeout)

    def wake(self) -> None:
        pass  # the answer is read at the next message or heartbeat

    async def close(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.drop(self.conversation_id, self.arrivals.put)
        if self.reading is not None:
            self.reading.cancel()
        if self.channel is not None:
            for group in self.groups:
                with contextlib.suppress(Exception):  # (the layer unreachable: nothing to do)
                    await self.layer.group_discard(group, self.channel)


Item = Batch | Replayed | Rechecked | Switched | Ended | None


@partial(database_sync_to_async, thread_sensitive=False)
def replay(conversation_id, user, after: int, branch: int | None = None, *,
           follow: bool = True) -> list[Item]:  # fmt: skip
    """The stored events after ``after`` (``Ended``: the conversation cannot be read). A
    reader of the active path (``branch`` None) that holds another branch than the active
    one is told where they part (``Switched``), then, with ``follow``, given the active
    path from there."""
    found = snapshot(conversation_id, user, after, branch)
    if found is None:
        return [Ended(NOT_FOUND)]
    current, events = found
    parted = resume_point(current, after) if branch is None else None
    if parted is None:
        return [Replayed(after, current, events)]
    switched = Switched(current.active_branch, parted)
    if not follow:
        return [switched]
    found = snapshot(conversation_id, user, parted)
    if found is None:
        return [Ended(NOT_FOUND)]
    current, events = found
    return [switched, Replayed(parted, current, events)]


class ConversationFeed:
    """``since``: the seq the reader holds (None: it holds what the first batch continues,
    a page that syncs itself on connecting); ``branch``: one branch's path, not moved by
    switches (None: the active one's); ``heartbeat``: None for no heartbeat."""

    def __init__(self, conversation_id, user, *, since: int | None, branch: int | None,
                 inbox: QueueInbox | ChannelInbox, recheck: Recheck,
                 heartbeat: float | None) -> None:  # fmt: skip
        self.conversation_id, self.user = conversation_id, user
        self.since, self.branch, self.inbox = since, branch, inbox
        self.recheck, self.heartbeat = recheck, heartbeat
        self.sent = since

    async def _replay(self, after: int) -> list[Item]:
        items = await replay(self.conversation_id, self.user, after, self.branch)
        if isinstance(items[-1], Replayed):
            self.sent = max(self.sent or 0, items[-1].conversation.last_seq)
        return items

    def _switched(self, message: dict) -> Switched:
        parted = message["fork_seq"]
        self.sent = max([parted, *(e["seq"] for e in message["events"])])
        return Switched(message["active"], parted, message["events"])

    async def _batch(self, message: dict) -> list[Item]:
        items: list[Item] = []
        if self.sent is not None and message["seq_from"] > self.sent + 1:
            items += await self._replay(self.sent)  # messages were dropped: from the log
            if items and isinstance(items[-1], Ended):
                return items
        sent = self.sent if self.sent is not None else message["seq_from"] - 1
        items.append(Batch(message, [e for e in message["events"] if e["seq"] > sent]))
        self.sent = max(sent, message["seq_to"])
        return items

    async def _take(self, message: dict | None) -> list[Item]:
        """What one message (None: a heartbeat) yields."""
        if denied := self.recheck.failed():
            return [Ended(denied)]  # revoked, deactivated or deleted since the check
        if message is None:
            denied = await self.recheck.now()
            return [Ended(denied)] if denied else [None]
        kind = message.get("type")
        if kind in ENDS:
            return [Ended(ENDS[kind])]
        if kind in RECHECKS:
            denied = await self.recheck.now()
            return [Ended(denied) if denied else Rechecked()]
        if kind == "conversation.branch":
            # A feed of one named branch is not moved.
            return [self._switched(message)] if self.branch is None else []
        if kind != BATCH:
            return []
        if self.sent is not None and message["seq_to"] <= self.sent:
            return []
        if self.branch is not None and any(
            e.get("branch", 0) != self.branch for e in message["events"]
        ):
            return []  # another branch's run
        self.recheck.beside(self.inbox.wake)
        return await self._batch(message)

    async def items(self) -> AsyncIterator[Item]:
        await self.inbox.open()  # before reading the log: nothing falls between
        try:
            if self.since is not None:
                for item in await self._replay(self.since):
                    yield item
                    if isinstance(item, Ended):
                        return
            while True:
                for item in await self._take(await self.inbox.get(self.heartbeat)):
                    yield item
                    if isinstance(item, Ended):
                        return
        finally:
            self.recheck.cancel()
            await self.inbox.close()
