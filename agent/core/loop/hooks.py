"""What a run is given besides its context: the configuration and its hooks.

``LoopConfig`` holds the model (a ``Provider``), the emit sink, the prompt queue (steering
and follow-ups), the approval gate, the context transforms (compaction's window, attached
images, a directory's instructions), the budget guard and the abort signal. The turn
functions read them; none of them owns the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from agent.core.config import Config
from agent.core.events import Event
from agent.core.instructions import DirectoryInstructions
from agent.core.loop.approval import ApprovalGate
from agent.core.loop.images import ImageStore
from agent.core.loop.queue import PromptQueue
from agent.core.loop.types import CallRefused, Guard, RunFailed
from agent.core.model.provider import Provider

log = logging.getLogger(__name__)

Sink = Callable[[Event], None]


class Emitter:
    """Numbers each event (the conversation's seq) and hands it to the sink; a broken
    sink must not break the run."""

    def __init__(self, sink: Sink | None, next_seq: int):
        self.sink = sink
        self.next_seq = next_seq

    def __call__(self, event: Event) -> Event:
        event = event.with_seq(self.next_seq)
        self.next_seq += 1
        if self.sink is not None:
            try:
                self.sink(event)
            except Exception:
                log.exception("event handler failed on %s", event.type)
        return event


class AbortSignal:
    """The running prompt's task, and whether the user asked it to stop (a cancellation
    from elsewhere, the server's shutdown, propagates instead of ending the run)."""

    def __init__(self) -> None:
        self.task: asyncio.Task | None = None
        self.requested = False

    def begin(self) -> None:
        self.task = asyncio.current_task()
        self.requested = False

    def end(self) -> None:
        self.task = None

    @property
    def active(self) -> bool:
        return self.task is not None and not self.task.done()

    def abort(self) -> bool:
        if not self.active:
            return False
        self.requested = True
        self.task.cancel()
        return True


@dataclass(slots=True)
class LoopConfig:
    config: Config
    provider: Provider
    emit: Emitter
    queue: PromptQueue
    approvals: ApprovalGate
    images: ImageStore
    abort: AbortSignal
    instructions: DirectoryInstructions | None = None
    # Checked before every call, not once per prompt: follow-ups, steers and compactions
    # spend within the same run (a budget checked at its start only was spent many times).
    guard: Guard | None = None

    async def may_call(self) -> None:
        """The guard's word before a model call: a refusal ends the run as an error."""
        if self.guard is None:
            return
        try:
            await self.guard()
        except CallRefused as refused:
            raise RunFailed(refused.code, refused.message) from refused
