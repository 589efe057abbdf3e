"""The browser's WebSocket: frames in (prompt, queued prompt, unqueue, cancel, sync),
rendered fragments out.

A thin adapter: it checks access on connect and on every frame (agent/access.py: any reader
may connect and sync; prompt, queue, unqueue, cancel, approve and compact need a role that
drives, a viewer gets an error frame and nothing runs), hands prompts to the
run manager (which starts the run as a background task), and forwards the fragments the
run broadcasts to the conversation's group. Bad frames get an error fragment; the socket
stays open. Every prompt frame is answered on its socket: accepted, or refused and why (the
alert beside the page's composer), so the page clears its box only for a prompt that runs.
Its credential (the session, signed in with the user's current password) is checked again
on every frame it receives and at most once a second while it sends, besides the
revocation messages (agent/web/revocation.py). A socket closed for good says why in its
code: 4404, the conversation is gone (deleted, or no longer the user's); 4401, signed out.

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
import json
import logging
import time
from functools import partial

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.contrib.auth import HASH_SESSION_KEY

from agent.access import DRIVE, allows, conversation_for
from agent.models import Conversation
from agent.runs import branches
from agent.runs.claim import RunRefused
from agent.runs.groups import group_name
from agent.runs.manager import runs
from agent.runs.snapshot import snapshot
from agent.server import logs, metrics
from agent.server.user_connections import connections, refused_message
from agent.ui.fragments import composer_alert, render_catch_up, render_reset, ws_error
from agent.web.prompts import (
    accept_prompt,
    decide_approval,
    regenerate,
    remove_queued,
    start_compaction,
    switch_branch,
)
from agent.web.revocation import NOT_FOUND, session_group, socket_access, user_group

log = logging.getLogger(__name__)

CLOSE_NOT_FOUND = 4404
CLOSE_SIGNED_OUT = 4401
CLOSE_TOO_MANY = 4429  # the user holds HARNESS_SOCKETS_PER_USER connections already
TOO_MANY_REASON = "too many connections"
# While frames stream out, the credential is re-checked at most this often (seconds): a
# query per frame would be one per 50 ms per socket.
RECHECK_INTERVAL = 1.0


@partial(database_sync_to_async, thread_sensitive=False)
def _owned(conversation_id, user, session=None):
    """The conversation if the user may read it (with their role), and the hash the session
    was signed in with (the session is loaded already, by the auth middleware; reading it
    here keeps any query off the event loop)."""
    # A socket's user object is as old as the socket: the access helper reads whether the
    # account is still active from the database, in the same query.
    conversation = conversation_for(user, conversation_id)
    return conversation, (session.get(HASH_SESSION_KEY) if session is not None else None)


_access = database_sync_to_async(socket_access, thread_sensitive=False)

# What a frame's action needs beyond reading (interfaces §12): a viewer may only sync.
DRIVING = frozenset({"cancel", "unqueue", "compact", "approve", "deny", "edit", "regenerate",
                     "branch"})  # fmt: skip
FORBIDDEN = "You may watch this conversation but not prompt or steer it."


@partial(database_sync_to_async, thread_sensitive=False)
def _catch_up(conversation_id, user, after: int) -> str | None:
    """What the page is missing after ``after``; None when the conversation is gone. A
    page that holds another branch's events than the active one's gets the transcript
    whole (interfaces §11)."""
    found = snapshot(conversation_id, user, after)
    if found is None:
        return None
    conversation, events = found
    if branches.resume_point(conversation, after) is not None:
        return _reset(conversation_id, user)
    return render_catch_up(events, after, conversation)


def _reset(conversation_id, user) -> str | None:
    found = snapshot(conversation_id, user)
    if found is None:
        return None
    conversation, events = found
    return render_reset(events, conversation, branches.switches(conversation))


_redraw = database_sync_to_async(_reset, thread_sensitive=False)


# Messages a socket may take straight from the sender's task (agent/server/layers.py): they
# only write a frame. Anything else (a branch redraw, a re-check) goes through the queue.
DIRECT = frozenset({"conversation.batch", "conversation.terminal"})


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


class ConversationConsumer(AsyncWebsocketConsumer):
    # The layer's messages this socket took off its queue and has not dispatched yet, and
    # the handlers running: while either is non-zero a frame offered directly could
    # overtake an earlier message, so it is declined and queued behind them.
    _in_hand = 0
    _dispatching = 0

    @property
    def channel_receive(self):
        return self._receive_counted

    @channel_receive.setter
    def channel_receive(self, receive) -> None:
        # Channels' __call__ sets this to the layer's receive for the socket's channel.
        async def counted() -> dict:
            message = await receive()
            self._in_hand += 1
            return message

        self._receive_counted = counted

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:  # however the socket's task ends: a disconnect, an error, a cancel
            layer = getattr(self, "channel_layer", None)
            if hasattr(layer, "detach") and hasattr(self, "channel_name"):
                layer.detach(self.channel_name)

    async def dispatch(self, message: dict) -> None:
        """Channels' dispatch first closes stale database connections through a hop to the
        one thread-sensitive worker thread, for every message: every streamed frame of
        every socket queued on that thread (the benchmark's worst bottleneck). This
        consumer touches the database only through ``database_sync_to_async``, which does
        that cleanup in its own thread, so the hop is skipped."""
        if not message["type"].startswith("websocket."):
            self._in_hand -= 1
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        self._dispatching += 1
        try:
            await handler(message)
        finally:
            self._dispatching -= 1

    async def take_directly(self, message: dict) -> bool:
        """The layer offers a message in the sender's task: taken (written to the socket
        now) only when nothing sent before it is still waiting here. It never pauses
        (Daphne's send writes to the transport and returns): a pause would hold up the run
        and let a later message reach another socket first (a test checks it)."""
        if self._in_hand or self._dispatching or message["type"] not in DIRECT:
            return False
        self._dispatching += 1
        try:
            await getattr(self, get_handler_name(message))(message)
        finally:
            self._dispatching -= 1
        return True

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
        self.session_key = session.session_key if session else None
        self.checked_at, self.rechecking, self.refused = time.monotonic(), None, False
        self.groups_joined = [
            group_name(conversation.id),
            user_group(self.user.pk),  # deactivation closes every socket of the user
            *([session_group(session.session_key)] if session and session.session_key else []),
        ]
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await runs.start_background()  # this process's cancel listener and run reaper
        await self.accept()
        self.counted = True
        metrics.SOCKETS.inc()
        if hasattr(self.channel_layer, "attach"):  # frames written in the run's task
            self.channel_layer.attach(self.channel_name, self.take_directly)

    async def disconnect(self, code: int) -> None:
        if getattr(self, "counted", False):
            self.counted = False
            metrics.SOCKETS.dec()
        if getattr(self, "rechecking", None) is not None:
            self.rechecking.cancel()
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def user_revoked(self, message: dict) -> None:
        """The user was deactivated or this session signed out: the socket goes."""
        await self._refuse("signed_out")

    async def conversation_deleted(self, message: dict) -> None:
        """The conversation was deleted (agent/web/revocation.py): the page is told now."""
        await self._refuse(NOT_FOUND)

    async def access_recheck(self, message: dict) -> None:
        """The owner changed who may read or drive it (agent/web/sharing.py): this socket
        goes if its user lost access (a role lowered is read on each frame anyway)."""
        await self._recheck()

    async def session_recheck(self, message: dict) -> None:
        """The user's password changed: this socket goes unless its session was signed in
        (or re-signed) with the new one."""
        await self._recheck()

    async def _refuse(self, reason: str) -> None:
        if self.refused:
            return
        self.refused = True
        # The page tells these closing codes apart, and reconnects after neither.
        if reason == NOT_FOUND:
            notice = composer_alert("This conversation is not available.", "forbidden")
            await self.send(text_data=notice)
            await self.close(code=CLOSE_NOT_FOUND)
        else:
            await self.send(text_data=composer_alert("You have been signed out.", "signed_out"))
            await self.close(code=CLOSE_SIGNED_OUT)

    async def _recheck(self) -> bool:
        """Reads the credential from the database (one query, in a worker thread); closes
        the socket and returns False if it no longer holds."""
        self.checked_at = time.monotonic()
        reason, self.session_hash, self.role = await _access(
            self.conversation_id, self.user.pk, self.session_key, self.session_hash
        )
        if reason is not None:
            await self._refuse(reason)
        return reason is None

    async def _recheck_in_background(self) -> None:
        try:
            await self._recheck()
        except Exception:  # a database hiccup: the next frame checks again
            log.exception("could not re-check a socket's session")
        finally:
            self.rechecking = None

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # Checked again on every frame: a user deactivated, a password changed, a session
        # ended since connecting must not keep driving the agent.
        if self.refused or not await self._recheck():
            return
        frame = self._parse(text_data, bytes_data)
        if isinstance(frame, str):
            await self.send(text_data=ws_error(frame))
            return
        action = frame.get("action")
        drives = "action" not in frame or (isinstance(action, str) and action in DRIVING)
        if drives and not allows(self.role, DRIVE):
            await self.send(text_data=ws_error(FORBIDDEN, "forbidden"))  # nothing is run
            return
        if frame.get("action") == "cancel":
            await runs.cancel(self.conversation_id)
            return
        if frame.get("action") == "sync":
            after = frame.get("after")
            if not isinstance(after, int) or isinstance(after, bool) or after < 0:
                await self.send(text_data=ws_error("sync needs a whole number 'after'."))
                return
            caught_up = await _catch_up(self.conversation_id, self.user, after)
            if caught_up is None:
                await self._refuse(NOT_FOUND)
            else:
                await self.send(text_data=caught_up)
            return
        if frame.get("action") == "unqueue":
            if not isinstance(frame.get("id"), str):
                await self.send(text_data=ws_error("unqueue needs the queued prompt's 'id'."))
            elif not await self._unqueue(frame["id"]):
                await self.send(text_data=composer_alert(
                    "That prompt is no longer queued: it was sent or removed.", "not_queued",
                ))  # fmt: skip
            return
        if action in ("edit", "regenerate", "branch"):
            await self._branch_action(frame)
            return
        if frame.get("action") == "compact":
            try:
                await start_compaction(self.conversation_id, self.user)
            except RunRefused as refused:
                await self.send(text_data=composer_alert(refused.message, refused.code))
            return
        if frame.get("action") in ("approve", "deny"):
            conversation, _ = await _owned(self.conversation_id, self.user)
            running = conversation is not None and conversation.state == Conversation.State.RUNNING
            try:
                await decide_approval(
                    self.conversation_id, self.user, frame.get("id"), frame["action"],
                    frame.get("reason"), approve_all=bool(frame.get("approve_all")),
                    running=running,
                )  # fmt: skip
            except RunRefused as refused:
                await self.send(text_data=composer_alert(refused.message, refused.code))
            return
        if "action" in frame:
            await self.send(text_data=ws_error(f"Unknown action {str(frame['action'])[:40]!r}."))
            return
        try:
            await accept_prompt(self.conversation_id, self.user, frame.get("content"),
                                frame.get("mode"), remember=True,
                                images=frame.get("images"))  # fmt: skip
        except RunRefused as refused:
            if refused.code == "empty_prompt":  # the page sends none: a malformed frame
                await self.send(text_data=ws_error(refused.message, refused.code))
            else:
                await self.send(text_data=composer_alert(refused.message, refused.code, "refused"))
            return
        await self.send(text_data=composer_alert(outcome="accepted"))

    async def _branch_action(self, frame: dict) -> None:
        """Edit a prompt, answer one again, or show another branch (interfaces §11)."""
        try:
            if frame["action"] == "edit":
                await accept_prompt(self.conversation_id, self.user, frame.get("content"),
                                    remember=True, edit_of=frame.get("of"))  # fmt: skip
            elif frame["action"] == "regenerate":
                await regenerate(self.conversation_id, self.user, frame.get("of"))
            else:
                await switch_branch(self.conversation_id, self.user, frame.get("id"))
        except RunRefused as refused:
            await self.send(text_data=composer_alert(refused.message, refused.code))

    async def conversation_branch(self, message: dict) -> None:
        """Another branch is shown (a switch, or a new one started): the transcript is
        drawn again, whole."""
        if self.refused:
            return
        redrawn = await _redraw(self.conversation_id, self.user)
        if redrawn is None:
            await self._refuse(NOT_FOUND)
        else:
            await self.send(text_data=redrawn)

    async def _unqueue(self, queue_id) -> bool:
        # Other processes are asked only while the conversation runs (one query).
        conversation, _ = await _owned(self.conversation_id, self.user)
        running = conversation is not None and conversation.state == Conversation.State.RUNNING
        return await remove_queued(self.conversation_id, queue_id, running=running)

    @staticmethod
    def _parse(text_data: str | None, bytes_data: bytes | None) -> dict | str:
        if text_data is None:
            return "Frames must be JSON text."
        try:
            frame = json.loads(text_data)
        except ValueError:
            return "That frame is not valid JSON."
        if not isinstance(frame, dict):
            return "A frame must be a JSON object."
        return frame

    async def conversation_terminal(self, message: dict) -> None:
        """A CLI agent's live terminal (interfaces §14): its rendered, sanitized screen."""
        if not self.refused:
            await self.send(text_data=message["html"])

    async def conversation_batch(self, message: dict) -> None:
        if self.refused:
            return
        # At most once a second, and beside the frames rather than in front of them: the
        # check is a database round trip, and frames must not wait for it. What can still
        # go out after a revocation is bounded by the interval.
        if self.rechecking is None and time.monotonic() - self.checked_at >= RECHECK_INTERVAL:
            self.checked_at = time.monotonic()
            self.rechecking = asyncio.ensure_future(self._recheck_in_background())
        await self.send(text_data=message["html"])
        metrics.FRAMES.inc()
