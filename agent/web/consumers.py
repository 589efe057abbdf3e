"""The browser's WebSocket: frames in (agent/web/socket_frames.py), rendered fragments out.

A thin adapter on Channels' consumer contract: it checks access on connect and on every
frame it receives (agent/access.py), hands prompts to the run manager (which starts the
run as a background task), and writes out as fragments what the conversation's
``ConversationFeed`` yields (agent/web/feed.py, read by a task of the socket's own): live
batches, rendered once per process (agent/web/viewers.py), a redraw on a branch switch,
what the log holds for a gap, and the end of its access. Its credential (the session,
signed in with the user's current password) is checked again on every frame it receives
and, by the feed, at most once a second while frames flow and on the revocation messages
(agent/web/revocation.py) its user's, session's and conversation's groups bring. A socket
closed for good says why in its code: 4404, the conversation is gone (deleted, or no
longer the user's); 4401, signed out.

Before the consumer, ``Admission`` (agent/web/routing.py puts it there): a handshake of no
signed-in user is refused (4401, before accepting: the client sees HTTP 403) with nothing
kept for it, no channel, group or count; a user who holds ``HARNESS_SOCKETS_PER_USER``
live connections already (their sockets and API event streams in this process,
agent/server/user_connections.py) gets the new socket accepted, the reason in
``#composer-alert`` (code ``too_many_connections``) and a close with code 4429 (reason
"too many connections"); their open sockets go on. The page tries again later by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from functools import partial

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.contrib.auth import HASH_SESSION_KEY

from agent.access import conversation_for, shared_list
from agent.models import Conversation
from agent.runs.manager import runs
from agent.runs.terminals import panes
from agent.server import logs, metrics
from agent.server.user_connections import connections, refused_message
from agent.ui.fragments import (
    archived_fragment,
    composer_alert,
    list_refresh_fragment,
    role_changed,
    shared_list_fragment,
    title_fragment,
)
from agent.web import socket_frames, terminal_frames, terminal_tail, viewers
from agent.web.feed import (
    Batch,
    ConversationFeed,
    Ended,
    Item,
    QueueInbox,
    Rechecked,
    Replayed,
    Switched,
)
from agent.web.rechecks import Recheck, Watch
from agent.web.revocation import (
    EVERYONE_GROUP,
    NOT_FOUND,
    session_group,
    socket_access,
    user_group,
)

log = logging.getLogger(__name__)

CLOSE_NOT_FOUND = 4404
CLOSE_SIGNED_OUT = 4401
CLOSE_SERVER_ERROR = 1011  # this socket's feed failed: the page tries again
CLOSE_TOO_MANY = 4429  # the user holds HARNESS_SOCKETS_PER_USER connections already
TOO_MANY_REASON = "too many connections"
# A socket redraws what notices change on its page (the sidebar's "Shared with me", its
# owner's list, the header's mark and heading) at most once in this time.
REDRAW_SECONDS = 2.0
REDRAW_TRIES = 3  # a redraw that fails is tried again after the pause, this many times in all


@partial(database_sync_to_async, thread_sensitive=False)
def _owned(conversation_id, user, session=None):
    """The conversation if the user may read it (with their role), and the hash the session
    was signed in with (the session is loaded already, by the auth middleware; reading it
    here keeps any query off the event loop)."""
    # A socket's user object is as old as the socket: the access helper reads whether the
    # account is still active from the database, in the same query.
    conversation = conversation_for(user, conversation_id)
    return conversation, (session.get(HASH_SESSION_KEY) if session is not None else None)


@partial(database_sync_to_async, thread_sensitive=False)
def _header(conversation_id) -> dict | None:
    """What the page's header shows of the conversation, as its row is now."""
    conversation = Conversation.objects.filter(pk=conversation_id).only("archived", "title").first()
    if conversation is None:
        return None
    return {"archived": conversation.archived, "title": conversation.display_title}


@partial(database_sync_to_async, thread_sensitive=False)
def _shared_list(user, current_id) -> str:
    return shared_list_fragment(shared_list(user), current_id)


class Admission:
    """ASGI, in front of the consumer: only a signed-in user's socket reaches it, and only
    while the user holds fewer than ``HARNESS_SOCKETS_PER_USER`` connections. The slot an
    admitted socket takes is given back when the consumer's application ends, however it
    ends (a disconnect, a close, an error, a cancel)."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send) -> None:
        user = scope.get("user")
        if user is None or not user.is_authenticated:
            # Refused at the handshake, before a channel, a group or a count exists for it.
            return await _refuse(receive, send, CLOSE_SIGNED_OUT)
        slot = connections.take(user.pk)
        if slot is None:
            metrics.CONNECTIONS_REFUSED.inc(label="websocket")
            alert = composer_alert(refused_message(), "too_many_connections")
            return await _refuse(receive, send, CLOSE_TOO_MANY, TOO_MANY_REASON, alert)
        with slot:
            await self.application(scope, receive, send)


async def _refuse(receive, send, code: int, reason: str = "", notice: str = "") -> None:
    """Answers the handshake with a close: before accepting it when there is nothing to
    tell (the client sees HTTP 403), else after, so the code and the notice reach it."""
    if (await receive())["type"] != "websocket.connect":
        return  # the client left before its handshake reached the application
    if notice:
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": notice})
    await send({"type": "websocket.close", "code": code, "reason": reason})


class ConversationConsumer(socket_frames.SocketFrames, AsyncWebsocketConsumer):
    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:  # however the socket's task ends: a disconnect, an error, a cancel
            await self._stop_watching()

    async def connect(self) -> None:
        self.conversation_id = self.scope["url_route"]["kwargs"]["conversation_id"]
        # The socket's task handles all its frames: its records carry the conversation.
        logs.conversation_id.set(str(self.conversation_id))
        self.user = self.scope["user"]
        session = self.scope.get("session")
        conversation, self.session_hash = await _owned(self.conversation_id, self.user, session)
        if conversation is None:
            await self.close(code=CLOSE_NOT_FOUND)  # another user's conversation: not found
            return
        self.role = conversation.role  # re-read with the credential on every frame
        self.owner_id = conversation.owner_id  # whose sandbox the terminal runs in
        self.terminal_bucket = terminal_frames.new_bucket()
        self.shown_role = self.role  # what the page was drawn for
        self.session_key = session.session_key if session else None
        watch = Watch(self.user.pk, conversation.id, session=self.session_key)
        self.recheck, self.refused = Recheck(self._credential, self._verdict, watch), False
        self.redrawing: asyncio.Future | None = None
        # "shared", "own": the sidebar's lists; "archived", "title": the header's
        self.redraws_due: set[str] = set()
        self.groups_joined = [
            user_group(self.user.pk),  # deactivation closes every socket of the user
            EVERYONE_GROUP,  # a conversation opened to the team: "Shared with me" redrawn
            *([session_group(session.session_key)] if session and session.session_key else []),
        ]
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await runs.start_background()  # this process's cancel listener and run reaper
        await self.accept()
        self.counted = True
        metrics.SOCKETS.inc()
        # The conversation's feed: this process's one subscription to it puts its messages
        # (each batch with its fragments, rendered once in the process) into the inbox,
        # the socket's own channel puts its user's and session's; the page syncs itself on
        # connecting, so the feed starts at the first batch.
        self.inbox = QueueInbox()
        feed = ConversationFeed(self.conversation_id, self.user, since=None, branch=None,
                                inbox=self.inbox, recheck=self.recheck,
                                heartbeat=None)  # fmt: skip
        self.watching = True
        await viewers.join(self.conversation_id, self)
        self.following = asyncio.ensure_future(self._follow(feed))
        # The conversation's terminals (its shell, its CLI agent's pane), live.
        self.tails = terminal_tail.follow(panes(conversation), self._send_terminal)

    async def _follow(self, feed: ConversationFeed) -> None:
        """Writes what the feed yields, in order: a frame sent after a branch switch never
        overtakes its redraw."""
        try:
            async with contextlib.aclosing(feed.items()) as items:
                async for item in items:
                    await self.write(item)
        except Exception:  # the page reconnects (it does after 1011, not 1000) and syncs
            log.exception("the feed of a socket on %s failed", self.conversation_id)
            await self.close(code=CLOSE_SERVER_ERROR)

    async def _send_terminal(self, frame: dict) -> None:
        if not self.refused:
            await self.send(text_data=json.dumps(frame))

    async def _stop_watching(self) -> None:
        for tail in getattr(self, "tails", []):
            tail.task.cancel()
        if getattr(self, "redrawing", None) is not None:
            self.redrawing.cancel()
        if getattr(self, "watching", False):
            self.watching = False
            following = getattr(self, "following", None)
            if following is not None and following is not asyncio.current_task():
                following.cancel()
            await viewers.leave(self.conversation_id, self)

    def _to_feed(self, message: dict) -> None:
        if getattr(self, "watching", False):
            self.inbox.put(message)

    async def disconnect(self, code: int) -> None:
        await self._stop_watching()
        if getattr(self, "counted", False):
            self.counted = False
            metrics.SOCKETS.dec()
        if getattr(self, "recheck", None) is not None:
            self.recheck.cancel()
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def user_revoked(self, message: dict) -> None:
        """The user was deactivated or this session signed out: the feed ends."""
        self._to_feed(message)

    async def shared_changed(self, message: dict) -> None:
        """Something was shared with the user, or no longer is (agent/web/sharing.py): the
        sidebar's "Shared with me", redrawn (it changed only on a reload)."""
        self._redraw_soon("shared")

    async def own_list_changed(self, message: dict) -> None:
        """One of the user's own conversations was made, renamed, pinned, archived or
        deleted (another tab, the API, the admin): the page fetches its list again, in the
        view it shows (its archived one or not), when its list is not in use."""
        self._redraw_soon("own")

    def _redraw_soon(self, part: str) -> None:
        """Notices coming faster (an owner opening a conversation to the team and closing
        it again, over and over) are coalesced: one redraw now, then at most one per
        REDRAW_SECONDS, of the page's part as it is then, so nobody can make every open
        page of the deployment query the database at their own pace."""
        if self.refused:
            return
        self.redraws_due.add(part)
        if self.redrawing is None:
            self.redrawing = asyncio.ensure_future(self._redraw_due())

    async def conversation_archived(self, message: dict) -> None:
        """The conversation was archived or brought back (agent/web/revocation.py, from the
        page, the API or the admin): its header's mark, and its owner's ⋯ menu entry,
        redrawn for this reader's role (only an owner's have Unarchive). As the row says
        when it is drawn, not as the message does: two changes made at once, in two
        processes, may arrive in either order, and the page must end as the row is."""
        self._redraw_soon("archived")

    async def conversation_renamed(self, message: dict) -> None:
        """The conversation was renamed (revocation.py: the page, the API or the admin): its
        heading, which the tab's title and the list's entry follow (as the row says)."""
        self._redraw_soon("title")

    async def _redraw_due(self) -> None:
        failures = 0
        try:
            while self.redraws_due and not self.refused:
                due, self.redraws_due = self.redraws_due, set()
                try:
                    await self._redraw(due)
                    failures = 0
                except Exception:  # (a busy database): drawn again after the pause, not lost
                    log.exception("could not redraw %s on %s", sorted(due), self.conversation_id)
                    failures += 1
                    if failures < REDRAW_TRIES:  # (a lasting fault: not logged for ever)
                        self.redraws_due |= due
                await asyncio.sleep(REDRAW_SECONDS)
        finally:
            self.redrawing = None

    async def _redraw(self, due: set[str]) -> None:
        if due & {"archived", "title"}:
            await self._redraw_header(due)
        if "shared" in due:
            await self.send(text_data=await _shared_list(self.user, self.conversation_id))
        if "own" in due:
            await self.send(text_data=list_refresh_fragment(self.conversation_id))

    async def _redraw_header(self, due: set[str]) -> None:
        header = await _header(self.conversation_id)
        if header is None or self.refused:
            return
        if "archived" in due:
            fragment = archived_fragment(self.conversation_id, header["archived"], self.role)
            await self.send(text_data=fragment)
        if "title" in due:
            await self.send(text_data=title_fragment(header["title"]))

    async def terminal_started(self, message: dict) -> None:
        """A terminal of the conversation started (agent/runs/groups.py): its tails look at
        their panes now, not at their next idle look."""
        for tail in getattr(self, "tails", []):
            tail.wake()

    async def session_recheck(self, message: dict) -> None:
        """The user's password changed: the feed ends unless this socket's session was
        signed in (or re-signed) with the new one."""
        self._to_feed(message)

    async def _refuse(self, reason: str) -> None:
        if self.refused:
            return
        self.refused = True
        await self._stop_watching()
        # The page tells these closing codes apart, and reconnects after neither.
        if reason == NOT_FOUND:
            notice = composer_alert("This conversation is not available.", "forbidden")
            await self.send(text_data=notice)
            await self.close(code=CLOSE_NOT_FOUND)
        else:
            await self.send(text_data=composer_alert("You have been signed out.", "signed_out"))
            await self.close(code=CLOSE_SIGNED_OUT)

    async def _recheck(self) -> bool:
        """Reads the credential from the database (in a worker thread); closes
        the socket and returns False if it no longer holds."""
        reason = await self.recheck.now()
        if reason is not None:
            await self._refuse(reason)
        return reason is None

    def _credential(self):
        """The credential read again (blocking: run with the process's other checks)."""
        return socket_access(self.conversation_id, self.user.pk, self.session_key,
                             self.session_hash)  # fmt: skip

    def _verdict(self, answer) -> str | None:
        """Why the credential no longer holds (None: it does); the role read again."""
        reason, self.session_hash, self.role = answer
        return reason

    async def write(self, item: Item) -> None:
        """Writes an item of the feed (agent/web/feed.py) as the page's fragments: a live
        batch's were rendered once for the process (agent/web/viewers.py)."""
        if self.refused:
            return
        if isinstance(item, Batch):
            await self.send(text_data=item.message["html"])
            metrics.FRAMES.inc()
        elif isinstance(item, Switched):
            await self.redraw()
        elif isinstance(item, Replayed):
            await self.fill(item)
        elif isinstance(item, Ended):
            await self._refuse(item.reason)
        elif isinstance(item, Rechecked) and self.role != self.shown_role:
            # The owner changed this reader's role: the page re-draws itself for it.
            self.shown_role = self.role
            await self.send(text_data=role_changed(self.role))
