"""``AgentLoop``: the built-in agent, the ``Agent`` the run layer and the command line hold.

It only wires the parts together (the context, the hooks, a run's state) and guards that one
prompt runs at a time; the work is in the turn functions (``run.py``, ``turn.py``,
``tools.py``, ``window.py``)."""

from __future__ import annotations

from typing import Any

from agent.core.config import Config
from agent.core.images import ImageRef, Loader
from agent.core.instructions import DirectoryInstructions
from agent.core.loop.approval import ApprovalGate
from agent.core.loop.context import AgentContext, TurnState
from agent.core.loop.hooks import AbortSignal, Emitter, LoopConfig, Sink
from agent.core.loop.images import ImageStore
from agent.core.loop.queue import PromptQueue
from agent.core.loop.run import AGAIN, COMPACT, run_prompt
from agent.core.loop.types import (
    Approver,
    Guard,
    NotRunning,
    PromptAlreadyRunning,
    QueuedPrompt,
    RunResult,
)
from agent.core.model.provider import Provider
from agent.core.tools.base import Tool


class AgentLoop:
    def __init__(
        self,
        provider: Provider,
        tools: list[Tool],
        config: Config,
        emit: Sink | None = None,
        *,
        system: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        next_seq: int = 1,
        instructions: DirectoryInstructions | None = None,
        approver: Approver | None = None,
        images: Loader | None = None,
        guard: Guard | None = None,
    ):
        self.provider = provider
        self.context = AgentContext.of(tools, config.approval, system, messages)
        emitter = Emitter(emit, next_seq)
        self.hooks = LoopConfig(
            config=config,
            provider=provider,
            emit=emitter,
            queue=PromptQueue(emitter),
            approvals=ApprovalGate(config.approval, emitter, approver),
            images=ImageStore(images),
            abort=AbortSignal(),
            instructions=instructions,
            guard=guard,
        )

    # -- what the run layer reads --------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.hooks.abort.task is not None

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation history as sent to the API (a copy)."""
        return list(self.context.messages)

    @property
    def next_seq(self) -> int:
        return self.hooks.emit.next_seq

    @next_seq.setter
    def next_seq(self, value: int) -> None:
        self.hooks.emit.next_seq = value

    @property
    def queued(self) -> list[QueuedPrompt]:
        return list(self.hooks.queue.items)

    @property
    def pending_approvals(self) -> list[str]:
        return list(self.hooks.approvals.pending)

    @property
    def approver(self) -> Approver | None:
        return self.hooks.approvals.approver

    @approver.setter
    def approver(self, approver: Approver | None) -> None:
        self.hooks.approvals.approver = approver

    def on_event(self, sink: Sink | None) -> None:
        """Where events go from now on."""
        self.hooks.emit.sink = sink

    # -- what the run layer asks ---------------------------------------------------------
    def cancel(self) -> bool:
        """Cancel the running prompt; a no-op (False) when idle."""
        return self.hooks.abort.abort()

    def queue(
        self,
        content: str,
        mode: str,
        queue_id: str | None = None,
        author: str | None = None,
        *,
        images: tuple[ImageRef, ...] = (),
    ) -> str:
        """Queue a prompt on the running one (a ``queued`` event); returns its id. Raises
        ``NotRunning`` when no prompt runs, ``QueueFull`` past ``MAX_QUEUED``."""
        self.hooks.queue.check_mode(mode)
        if not self.hooks.abort.active:
            raise NotRunning("no prompt is running")
        return self.hooks.queue.add(content, mode, queue_id, author, images)

    def unqueue(self, queue_id: str) -> bool:
        """Take a queued prompt out (an ``unqueued`` event); False when there is no such
        prompt in the queue (unknown, or delivered already)."""
        return self.hooks.queue.remove(queue_id)

    def drop_from(self, author: str) -> int:
        """Take out every queued prompt of ``author`` (who lost access to the conversation:
        what they queued must not run in the owner's workspace); how many went."""
        return self.hooks.queue.drop_from(author)

    def decide(
        self,
        call_id: str,
        decision: str,
        reason: str | None = None,
        by: str = "",
        *,
        approve_all: bool = False,
    ) -> str:
        return self.hooks.approvals.decide(call_id, decision, reason, by, approve_all=approve_all)

    async def prompt(
        self,
        content: str | None,
        author: str | None = None,
        *,
        again: bool = False,
        images: tuple[ImageRef, ...] = (),
    ) -> RunResult:
        """Run a prompt to its end (queued prompts included); ``None`` compacts the history
        instead; ``again``: answer the prompt the history ends with once more, with no new
        ``user`` event. ``author``: who sent it, carried by its ``user`` event; ``images``:
        attached to it (their data comes from the image loader)."""
        if again:
            start: QueuedPrompt | str = AGAIN
        elif content is None:
            start = COMPACT
        else:
            start = QueuedPrompt("", content, "", author or "", tuple(images))
        return await self._run(start)

    async def compact(self) -> RunResult:
        return await self._run(COMPACT)

    async def answer_again(self) -> RunResult:
        return await self._run(AGAIN)

    async def _run(self, start: QueuedPrompt | str) -> RunResult:
        hooks = self.hooks
        if hooks.abort.task is not None:
            raise PromptAlreadyRunning()
        hooks.abort.begin()
        hooks.approvals.begin_run()
        try:
            return await run_prompt(self.context, hooks, TurnState(), start)
        finally:
            hooks.abort.end()
            hooks.queue.clear()
            hooks.approvals.end_run()
