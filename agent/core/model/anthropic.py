"""The Anthropic Messages API as a ``Provider``, over the official SDK.

The SDK makes every request (auth, retries with retry-after, status errors before a stream
starts, the connection pool). A stream's body is read off the wire by ``wire.events`` rather
than iterated through the SDK, whose pydantic model per event was the largest single cost
per delta at 250 sessions; each event then becomes one of ``stream.py``'s typed events.
A compaction's answer is the SDK's own typed ``Message``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from agent.core.model import wire
from agent.core.model.provider import Completion, Request
from agent.core.model.stream import StreamEvent, Usage, parse

if TYPE_CHECKING:
    import anthropic


class AnthropicProvider:
    def __init__(self, client: anthropic.AsyncAnthropic):
        self.client = client

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        response = await self.client.messages.create(**request.to_api(), stream=True)
        try:
            async for raw in wire.events(response):
                event = parse(raw)
                if event is not None:
                    yield event
        finally:
            # Shielded: a cancelled run still hands its connection back.
            with contextlib.suppress(Exception):
                await asyncio.shield(response.close())

    async def complete(self, request: Request) -> Completion:
        message = await self.client.messages.create(**request.to_api())
        text = "".join(block.text for block in message.content if block.type == "text")
        usage = Usage()
        usage.update(message.usage.model_dump())
        return Completion(text.strip(), usage, message.model)

    async def close(self) -> None:
        await self.client.close()
