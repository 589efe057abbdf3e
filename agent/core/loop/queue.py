"""Prompts sent while a prompt runs: a steer goes in after the tool that is executing (the
turn's other calls are not run) or at the end of the turn being streamed; a follow-up when
the agent would otherwise stop, one at a time, in the same run."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from agent.core.events import QUEUE_MODES, Event, QueuedEvent, UnqueuedEvent
from agent.core.images import ImageRef
from agent.core.loop.types import MAX_QUEUED, QueuedPrompt, QueueFull


class PromptQueue:
    def __init__(self, emit: Callable[[Event], object]):
        self.emit = emit
        self.items: list[QueuedPrompt] = []

    def add(
        self,
        content: str,
        mode: str,
        queue_id: str | None = None,
        author: str | None = None,
        images: tuple[ImageRef, ...] = (),
    ) -> str:
        self.check_mode(mode)
        if len(self.items) >= MAX_QUEUED:
            raise QueueFull(f"{MAX_QUEUED} prompts are queued already")
        item = QueuedPrompt(queue_id or uuid.uuid4().hex, content, mode, author or "", images)
        self.items.append(item)
        self.emit(QueuedEvent(id=item.id, content=content, mode=mode, author=author or None))
        return item.id

    @staticmethod
    def check_mode(mode: str) -> None:
        if mode not in QUEUE_MODES:
            raise ValueError(f"unknown queue mode {mode!r}")

    def remove(self, queue_id: str) -> bool:
        for index, item in enumerate(self.items):
            if item.id == queue_id:
                del self.items[index]
                self.emit(UnqueuedEvent(id=queue_id, reason="removed"))
                return True
        return False

    def drop_from(self, author: str) -> int:
        gone = [item for item in self.items if item.author == author]
        self.items = [item for item in self.items if item.author != author]
        for item in gone:
            self.emit(UnqueuedEvent(id=item.id, reason="access_lost"))
        return len(gone)

    def steers(self) -> list[QueuedPrompt]:
        """The steering prompts waiting, taken out of the queue."""
        steers = [item for item in self.items if item.mode == "steer"]
        if steers:
            self.items = [item for item in self.items if item.mode != "steer"]
        return steers

    def next(self) -> list[QueuedPrompt]:
        """When the agent would stop: every steer waiting, else the first follow-up."""
        steers = self.steers()
        if steers or not self.items:
            return steers
        return [self.items.pop(0)]

    def drop_all(self, reason: str) -> None:
        items, self.items = self.items, []
        for item in items:
            self.emit(UnqueuedEvent(id=item.id, reason=reason))

    def clear(self) -> None:
        self.items.clear()
