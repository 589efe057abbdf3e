"""A project conversation's checkpoints during a run (docs/API.md, "Projects"): when the
prompt starts, and after every tool call that may have changed the worktree (the built-in
agent's ``write``, ``edit`` and ``bash``; every tool of a CLI agent, which runs its own),
the worktree is recorded in the owner's sandbox and a ``checkpoint`` event follows the
call's ``tool_result`` through the run's own event path (stored, streamed, replayed).

The built-in agent's tools wait for their checkpoint before the next call runs, so each
checkpoint holds exactly what its call did. A CLI agent's calls have already run when
their results are read: their checkpoints are taken as the results arrive, in order.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from asgiref.sync import sync_to_async

from agent.core.events import CheckpointEvent
from agent.core.tools.base import ToolResult
from agent.models import Conversation
from agent.runs import projects, rewind

log = logging.getLogger(__name__)

CHANGING_TOOLS = ("write", "edit", "bash")


class Checkpointer:
    def __init__(self, conversation: Conversation):
        self.conversation = conversation
        self.lock = asyncio.Lock()
        self.ready: list[dict] = []  # recorded, waiting for their tool_result to pass
        self.tasks: set[asyncio.Task] = set()

    async def record(self) -> dict | None:
        """The worktree recorded now (None: unchanged, or the recording failed: a run
        never fails for its checkpoint; the next one records what this one missed)."""
        async with self.lock:
            try:
                return await asyncio.to_thread(projects.checkpoint, self.conversation)
            except Exception as exc:  # noqa: BLE001 - logged; the run goes on
                log.warning("checkpoint of %s failed: %s", self.conversation.id, exc)
                return None

    async def rewind(self, seq: int) -> list[CheckpointEvent]:
        """The worktree made the checkpoint taken when the prompt at ``seq`` started; the
        checkpoints that made (none when there is none, or it failed: said in the log)."""
        async with self.lock:
            try:
                target = await sync_to_async(rewind.before, thread_sensitive=False)(
                    self.conversation, seq
                )
                if target is None:
                    return []
                done = await asyncio.to_thread(projects.restore, self.conversation, target)
            except Exception as exc:  # noqa: BLE001 - logged; the prompt still runs
                log.warning("restore of %s failed: %s", self.conversation.id, exc)
                return []
        return rewind.made(done)

    async def after_tool(self) -> None:
        done = await self.record()
        if done is not None:
            self.ready.append(done)

    def take(self) -> list[CheckpointEvent]:
        """The checkpoints recorded since the last call, as events (unnumbered)."""
        ready, self.ready = self.ready, []
        return [CheckpointEvent(id=c["id"], files=list(c["files"])) for c in ready]

    def later(self, emit) -> None:
        """A CLI agent's call ended: record in the background, then ``emit`` the event."""

        async def run() -> None:
            done = await self.record()
            if done is not None:
                emit(CheckpointEvent(id=done["id"], files=list(done["files"])))

        task = asyncio.ensure_future(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def settle(self) -> None:
        """Before the run's end: the background checkpoints done."""
        if self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)


class CheckpointedTool:
    """A tool whose every call is followed by a checkpoint, before the next call runs."""

    def __init__(self, tool, checkpointer: Checkpointer):
        self.tool = tool
        self.checkpointer = checkpointer
        self.name = tool.name
        self.description = tool.description
        self.input_schema = tool.input_schema
        preview = getattr(tool, "preview", None)
        if preview is not None:
            self.preview = preview

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        try:
            return await self.tool.execute(params)
        finally:
            await self.checkpointer.after_tool()


def wrap(tools: list, checkpointer: Checkpointer) -> list:
    return [CheckpointedTool(t, checkpointer) if t.name in CHANGING_TOOLS else t for t in tools]
