"""A run: a prompt (or a compaction, or the last prompt answered again) to its end, with
what was queued meanwhile. Everything is reported as events; a run ends with exactly one
``status`` of state idle or error, never with an exception, except a cancellation that came
from outside the harness (the server stopping), which propagates."""

from __future__ import annotations

import asyncio

from agent.core import images as images_mod
from agent.core.events import ErrorEvent, StatusEvent
from agent.core.loop import window
from agent.core.loop.context import (
    AgentContext,
    TurnState,
    close_turn,
    deliver,
    drop_unanswered_prompt,
)
from agent.core.loop.hooks import LoopConfig
from agent.core.loop.turn import run_turns
from agent.core.loop.types import QueuedPrompt, RunFailed, RunResult

COMPACT = "compact"  # the run compacts the history instead of answering
AGAIN = "again"  # the run answers the prompt the history ends with once more


async def run_prompt(
    ctx: AgentContext, cfg: LoopConfig, state: TurnState, start: QueuedPrompt | str
) -> RunResult:
    """``start``: the prompt that starts the run, or ``COMPACT`` / ``AGAIN``."""
    if start == AGAIN:
        state.prompt_index = None  # the prompt is an earlier event's: never dropped
    elif start == COMPACT:
        state.prompt_index = None
        cfg.emit(StatusEvent(state="thinking", message="Compacting"))
    else:
        deliver(ctx, cfg, state, [start])
    try:
        if start == AGAIN:
            result = await run_turns(ctx, cfg, state, None)
        elif start == COMPACT:
            result = await window.compact_requested(ctx, cfg)
        else:
            result = await run_turns(ctx, cfg, state, state.prompt_index)
        while next_prompts := cfg.queue.next():
            # The agent would stop here: what was queued goes on in this run.
            deliver(ctx, cfg, state, next_prompts)
            result = await run_turns(ctx, cfg, state, state.prompt_index)
    except asyncio.CancelledError:
        close_turn(
            ctx,
            cfg,
            state,
            "cancelled by the user before it ran",
            "cancelled by the user while it ran (it was stopped)",
        )
        cfg.queue.drop_all("cancelled" if cfg.abort.requested else "not_sent")
        cfg.emit(ErrorEvent(message="Cancelled", code="cancelled"))
        cfg.emit(StatusEvent(state="error", message="Cancelled"))
        task = asyncio.current_task()
        if not cfg.abort.requested and task is not None:
            raise  # cancelled from outside (shutdown): let it propagate
        if task is not None:
            task.uncancel()
        return RunResult("error", "Cancelled", "cancelled")
    except RunFailed as failure:
        close_turn(ctx, cfg, state, f"not run: {failure.message}")
        drop_unanswered_prompt(ctx, state.prompt_index)
        if state.delivered_images:  # (a refused image must not fail every later request)
            ctx.messages[:] = images_mod.named(ctx.messages, state.delivered_images)
        cfg.queue.drop_all("not_sent")
        cfg.emit(ErrorEvent(message=failure.message, code=failure.code))
        cfg.emit(StatusEvent(state="error", message=failure.message))
        return RunResult("error", failure.message, failure.code)
    cfg.emit(StatusEvent(state="idle"))
    return result
