"""The browser's WebSocket: frames in (prompt, cancel), rendered fragments out.

A thin adapter: it checks the owner on connect and on every frame, hands prompts to the
run manager (which starts the run as a background task), and forwards the fragments the
run broadcasts to the conversation's group. Bad frames get an error fragment; the socket
stays open.
"""

from __future__ import annotations

import json
from functools import partial

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from .conversations import _get_conversation_for_user, snapshot
from .fragments import render_catch_up, ws_error
from .revocation import session_group, user_group
from .runs import RunRefused, group_name, runs

CLOSE_NOT_FOUND = 4404
CLOSE_SIGNED_OUT = 4401


@partial(database_sync_to_async, thread_sensitive=False)
def _owned(conversation_id, user):
    # A socket's user object is as old as the socket: whether the account is still active
    # is read from the database, in the same query.
    return _get_conversation_for_user(conversation_id, user, active_in_db=True)


@partial(database_sync_to_async, thread_sensitive=False)
def _catch_up(conversation_id, user, after: int) -> str:
    found = snapshot(conversation_id, user, after)
    if found is None:
        return ws_error("This conversation is not available.", "forbidden")
    conversation, events = found
    return render_catch_up(events, after, conversation)


class ConversationConsumer(AsyncWebsocketConsumer):
    async def dispatch(self, message: dict) -> None:
        """Channels' dispatch first closes stale database connections through a hop to the
        one thread-sensitive worker thread, for every message: every streamed frame of
        every socket queued on that thread (the benchmark's worst bottleneck). This
        consumer touches the database only through ``database_sync_to_async``, which does
        that cleanup in its own thread, so the hop is skipped."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def connect(self) -> None:
        self.conversation_id = self.scope["url_route"]["kwargs"]["conversation_id"]
        self.user = self.scope["user"]
        conversation = await _owned(self.conversation_id, self.user)
        if conversation is None:
            await self.close(code=CLOSE_NOT_FOUND)  # another user's conversation: not found
            return
        session = self.scope.get("session")
        self.groups_joined = [
            group_name(conversation.id),
            user_group(self.user.pk),  # deactivation closes every socket of the user
            *([session_group(session.session_key)] if session and session.session_key else []),
        ]
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await runs.start_background()  # this process's cancel listener and run reaper
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def user_revoked(self, message: dict) -> None:
        """The user was deactivated or this session signed out: the socket goes."""
        await self.send(text_data=ws_error("You have been signed out.", "signed_out"))
        await self.close(code=CLOSE_SIGNED_OUT)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # Ownership is checked again on every frame: a user deactivated since connecting
        # must not keep driving the agent.
        if await _owned(self.conversation_id, self.user) is None:
            await self.send(text_data=ws_error("This conversation is not available.", "forbidden"))
            await self.close(code=CLOSE_NOT_FOUND)
            return
        frame = self._parse(text_data, bytes_data)
        if isinstance(frame, str):
            await self.send(text_data=ws_error(frame))
            return
        if frame.get("action") == "cancel":
            await runs.cancel(self.conversation_id)
            return
        if frame.get("action") == "sync":
            after = frame.get("after")
            if not isinstance(after, int) or isinstance(after, bool) or after < 0:
                await self.send(text_data=ws_error("sync needs a whole number 'after'."))
                return
            await self.send(text_data=await _catch_up(self.conversation_id, self.user, after))
            return
        if "action" in frame:
            await self.send(text_data=ws_error(f"Unknown action {str(frame['action'])[:40]!r}."))
            return
        content = frame.get("content")
        if not isinstance(content, str) or not content.strip():
            await self.send(text_data=ws_error("Type a prompt first.", "empty_prompt"))
            return
        if len(content) > settings.HARNESS_MAX_PROMPT_CHARS:
            await self.send(text_data=ws_error(
                f"The prompt is {len(content):,} characters; the limit is "
                f"{settings.HARNESS_MAX_PROMPT_CHARS:,}. Nothing was sent.", "prompt_too_large",
            ))  # fmt: skip
            return
        try:
            await runs.start(self.conversation_id, self.user.pk, content, remember=True)
        except RunRefused as refused:
            await self.send(text_data=ws_error(refused.message, refused.code))

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

    async def conversation_batch(self, message: dict) -> None:
        await self.send(text_data=message["html"])
