"""Previews over WebSocket: a socket opened at a signed preview address
(agent/web/preview_tokens.py) is relayed, message for message, to a WebSocket of the
server listening at that port inside the conversation's terminal sandbox. A previewed page
is an opaque origin and sends no cookies: the address is its credential, checked with the
access rule when the socket opens."""

from __future__ import annotations

import asyncio
import contextlib

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from websockets.asyncio.client import connect
from websockets.exceptions import WebSocketException

from agent import access
from agent.access import DRIVE
from agent.runs import previews
from agent.web import preview_tokens
from agent.web.previews import parse, sandboxes_for, target

MAX_MESSAGE = 4 * 1024 * 1024


class PreviewSocket(AsyncWebsocketConsumer):
    upstream = None
    user_id = None
    reading = None  # the conversation, when the user only reads it
    relay: asyncio.Task | None = None

    async def connect(self) -> None:
        parsed = parse(self.scope["path"].removeprefix("/preview/"))
        if parsed is None or not parsed[2].startswith(preview_tokens.MARK):
            return await self.close()
        conversation_id, port, remainder = parsed
        user_id = preview_tokens.user_for(remainder.partition("/")[0], conversation_id, port)
        readable = database_sync_to_async(access.readable_one)
        conversation = None if user_id is None else await readable(user_id, conversation_id)
        if conversation is None:
            return await self.close()
        reading = None if access.allows(conversation.role, DRIVE) else conversation_id
        try:
            previews.slots.acquire(user_id, reading)
        except previews.PreviewUnavailable:
            return await self.close()
        self.user_id, self.reading = user_id, reading
        query = self.scope.get("query_string", b"").decode("latin-1")
        offered = self.scope.get("subprotocols") or None
        try:
            sock = await previews.connect_socket(conversation_id, port,
                                                 sandboxes_for(conversation.role))  # fmt: skip
            self.upstream = await connect(f"ws://127.0.0.1:{port}{target(remainder, query)}",
                                          sock=sock, subprotocols=offered,
                                          max_size=MAX_MESSAGE, open_timeout=10)  # fmt: skip
        except (previews.PreviewUnavailable, OSError, TimeoutError, WebSocketException):
            return await self.close()
        await self.accept(subprotocol=self.upstream.subprotocol)
        self.relay = asyncio.create_task(self._from_upstream())

    async def _from_upstream(self) -> None:
        with contextlib.suppress(WebSocketException, OSError):
            async for message in self.upstream:
                if isinstance(message, str):
                    await self.send(text_data=message)
                else:
                    await self.send(bytes_data=message)
        await self.close()

    async def receive(self, text_data=None, bytes_data=None) -> None:
        if self.upstream is None:
            return
        with contextlib.suppress(WebSocketException, OSError):
            await self.upstream.send(text_data if text_data is not None else bytes_data)

    async def disconnect(self, code) -> None:
        if self.relay is not None and self.relay is not asyncio.current_task():
            self.relay.cancel()
        if self.upstream is not None:
            with contextlib.suppress(WebSocketException, OSError):
                await self.upstream.close()
        if self.user_id is not None:
            previews.slots.release(self.user_id, self.reading)
            self.user_id = None
