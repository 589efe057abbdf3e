"""A conversation's events for one reader, as a stream: the stored ones after a seq, then
the live ones, with no gap and no duplicate, until the reader's access ends.

``ConversationFeed.events()`` joins the conversation's group (and the reader's credential
groups) and this process's receiver of the live batches before reading the event log, so
nothing falls in between, and skips by seq what the log already gave. A batch that does
not continue what was sent (a message lost by the layer) is filled from the log. A branch
switch yields a ``branch`` event, then the new path's events after the point where the
paths part; a feed of one named branch is not moved. The feed ends when the credential is
revoked or the conversation deleted (a message to one of its groups:
agent/web/revocation.py), when a re-check fails (on ``access.recheck``, at each heartbeat,
and at most once a second while events flow), or when the conversation can no longer be
read. ``None`` is yielded for a heartbeat: nothing happened for ``heartbeat`` seconds.

The API's event stream (agent/web/api_events.py) serialises what it yields as SSE.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from agent.core.events import BranchEvent
from agent.runs.branches import resume_point
from agent.runs.groups import group_name
from agent.runs.snapshot import snapshot
from agent.web import dispatch

# While events flow, the credential is re-checked at most this often (seconds).
RECHECK_INTERVAL = 1.0
ENDS = frozenset({"user.revoked", "token.revoked", "conversation.deleted"})


class ConversationFeed:
    """``still_valid``: the reader's credential and access, read again (a database query);
    ``groups``: the credential's groups whose messages end the feed."""

    def __init__(self, conversation_id, user, *, since: int, branch: int | None,
                 groups: list[str], still_valid: Callable[[], Awaitable[bool]],
                 heartbeat: float) -> None:  # fmt: skip
        self.conversation_id, self.user = conversation_id, user
        self.since, self.branch = since, branch
        self.groups = [group_name(conversation_id), *groups]
        self.still_valid, self.heartbeat = still_valid, heartbeat
        self.sent = since

    async def _replay(self, after: int) -> list[dict[str, Any]] | None:
        """The stored events after ``after`` (None: the conversation cannot be read now)."""
        found = await sync_to_async(snapshot)(self.conversation_id, self.user, after, self.branch)
        if found is None:
            return None
        current, events = found
        items: list[dict[str, Any]] = []
        if self.branch is None:
            # A reader holding another branch than the active one: told where they part,
            # then given the active branch from there.
            parted = await sync_to_async(resume_point, thread_sensitive=False)(current, after)
            if parted is not None:
                items.append(BranchEvent(seq=parted, active=current.active_branch,
                                         fork_seq=parted).to_dict())  # fmt: skip
                found = await sync_to_async(snapshot)(self.conversation_id, self.user, parted)
                if found is None:
                    return None
                current, events = found
                after = parted
        items += [e.to_dict() for e in events if e.seq > after]
        self.sent = max(self.sent, current.last_seq)
        return items

    def _switched(self, message: dict) -> list[dict[str, Any]]:
        """Another branch is shown: what follows the parting point is replaced."""
        parted = message["fork_seq"]
        shown = BranchEvent(seq=parted, active=message["active"], fork_seq=parted).to_dict()
        self.sent = max([parted, *(e["seq"] for e in message["events"])])
        return [shown, *message["events"]]

    async def _batch(self, message: dict) -> list[dict[str, Any]] | None:
        items: list[dict[str, Any]] = []
        if message["seq_from"] > self.sent + 1:  # messages were dropped: fill from the log
            replayed = await self._replay(self.sent)
            if replayed is None:
                return None
            items += replayed
        for event in message["events"]:
            if event["seq"] > self.sent:
                items.append(event)
                self.sent = event["seq"]
        return items

    async def events(self) -> AsyncIterator[dict[str, Any] | None]:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        for group in self.groups:  # joined before reading the log: nothing falls between
            await layer.group_add(group, channel)
        # The batches come through this process's receiver of them (agent/web/dispatch.py).
        batches = await dispatch.dispatcher()
        batches.add_stream(self.conversation_id, channel)
        # One receive outlives heartbeats: cancelling a receive makes channels-redis's
        # pub/sub layer drop the channel (what arrives meanwhile would be lost).
        receiving: asyncio.Future | None = None
        # The re-check while events flow runs beside them (a round trip must not hold
        # frames up): its answer is read at the next message or heartbeat.
        checking: asyncio.Future | None = None
        checked_at = time.monotonic()
        try:
            replayed = await self._replay(self.since)
            if replayed is None:
                return
            for item in replayed:
                yield item
            while True:
                receiving = receiving or asyncio.ensure_future(layer.receive(channel))
                done, _ = await asyncio.wait({receiving}, timeout=self.heartbeat)
                if checking is not None and checking.done():
                    if not checking.result():
                        return  # revoked, deactivated or deleted since the last check
                    checking = None
                if not done:
                    checked_at = time.monotonic()
                    if not await self.still_valid():
                        return
                    yield None
                    continue
                message, receiving = receiving.result(), None
                kind = message.get("type")
                if kind in ENDS:
                    return
                if kind == "access.recheck":  # sharing changed
                    checked_at = time.monotonic()
                    if not await self.still_valid():
                        return
                    continue
                if kind == "conversation.branch":
                    if self.branch is None:  # a feed of one named branch is not moved
                        for item in self._switched(message):
                            yield item
                    continue
                if kind != "conversation.batch" or message["seq_to"] <= self.sent:
                    continue
                if self.branch is not None and any(
                    e.get("branch", 0) != self.branch for e in message["events"]
                ):
                    continue  # another branch's run
                if checking is None and time.monotonic() - checked_at >= RECHECK_INTERVAL:
                    checking = asyncio.ensure_future(self.still_valid())
                    checked_at = time.monotonic()
                items = await self._batch(message)
                if items is None:
                    return
                for item in items:
                    yield item
        finally:
            batches.drop_stream(self.conversation_id, channel)
            for pending in (receiving, checking):
                if pending is not None:
                    pending.cancel()
            for group in self.groups:
                await layer.group_discard(group, channel)
