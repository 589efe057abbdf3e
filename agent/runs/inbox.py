"""A run's events on their way from the agent loop to the run's writer."""

from __future__ import annotations

import asyncio

from agent.core.events import Event


class Inbox:
    """Putting an event is a list append; the writer is woken only when it waits (not once
    per delta while it waits out a frame)."""

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._closed = False
        self._ready = asyncio.Event()

    def put(self, event: Event) -> None:
        self._events.append(event)
        self._ready.set()

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    def take_nowait(self) -> tuple[list[Event], bool]:
        """Everything pending, and whether the run has ended (nothing more will come)."""
        events, self._events = self._events, []
        self._ready.clear()
        return events, self._closed

    async def take(self) -> tuple[list[Event], bool]:
        await self._ready.wait()
        return self.take_nowait()
