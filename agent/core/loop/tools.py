"""A turn's tool calls, run one by one: fail-fast (after the first error the rest are
skipped), each through the approval gate, and not at all once the user steered; every call
still gets a tool_result, as the API requires. A subdirectory's AGENTS.md is given beside
the result of the first call that touches it."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from agent.core.events import StatusEvent
from agent.core.loop.context import AgentContext, TurnState, record_result, send_results
from agent.core.loop.hooks import LoopConfig
from agent.core.loop.types import STEERED, QueuedPrompt, denied_message
from agent.core.tools.base import ToolResult, fail
from agent.core.tools.oserrors import os_error_message

log = logging.getLogger(__name__)

SKIPPED = "skipped: an earlier tool call in this turn failed"


async def run_tools(
    ctx: AgentContext,
    cfg: LoopConfig,
    state: TurnState,
    tool_uses: list[dict[str, Any]],
    *,
    steered: bool = False,
) -> list[QueuedPrompt]:
    """Run the calls in order; ``steered``: the user steered before they ran. Returns the
    steering prompts taken from the queue while they ran."""
    state.results = []
    failed = False
    steers: list[QueuedPrompt] = []
    for use in tool_uses:
        notes = None
        if steered or steers:
            result = fail(STEERED)
        elif failed:
            result = fail(SKIPPED)
        else:
            decision = await cfg.approvals.check(use, ctx.tools)
            if decision is not None and decision.decision == "deny":
                result = fail(denied_message(decision.reason))
            else:
                cfg.emit(StatusEvent(state="running_tool", message=use["name"]))
                state.executing = use["id"]
                result = await execute(ctx, use)
                state.executing = None
            failed = result.is_error
            if not failed and cfg.instructions is not None:
                notes = await _instructions_after(cfg, use)
            steers = cfg.queue.steers()
        record_result(cfg, state, use["id"], result, notes)
    send_results(ctx, cfg, state)
    return steers


async def execute(ctx: AgentContext, use: dict[str, Any]) -> ToolResult:
    tool = ctx.tools.get(use["name"])
    if tool is None:
        return fail(f"unknown tool: {use['name']}")
    try:
        return await tool.execute(use["input"])
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("tool %s crashed", use["name"])
        # An OSError's text names the host path it failed on: the model gets its errno
        # message only (the log above keeps the whole of it for the operator).
        detail = os_error_message(exc) if isinstance(exc, OSError) else str(exc)
        return fail(f"tool failed: {type(exc).__name__}: {detail}")


async def _instructions_after(cfg: LoopConfig, use: dict[str, Any]) -> str | None:
    try:
        return await cfg.instructions.after_tool(use["name"], use["input"])
    except asyncio.CancelledError:
        raise
    except Exception:  # instructions that cannot be read must not fail the call
        log.exception("could not read the instructions for %s", use["name"])
        return None
