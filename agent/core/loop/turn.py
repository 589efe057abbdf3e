"""Turns: stream the model's answer, run the tools it asks for, send the results back, and
repeat until the model stops calling tools, ``max_turns`` is reached or a steer arrives
(which goes in at once, after the tool running or at the end of the turn streaming)."""

from __future__ import annotations

import asyncio
import contextlib

from agent.core import compaction
from agent.core.errors import classify
from agent.core.events import ErrorEvent, StatusEvent, ToolCallEvent, UsageEvent
from agent.core.loop import window
from agent.core.loop.context import AgentContext, TurnState, deliver, drop_unanswered_prompt, mark
from agent.core.loop.hooks import LoopConfig
from agent.core.loop.tools import run_tools
from agent.core.loop.types import RunFailed, RunResult
from agent.core.model.accumulator import TurnAccumulator
from agent.core.model.provider import Request
from agent.core.pricing import cost_usd

INCOMPLETE = "The response stream ended before the message was complete."
REFUSED = "The model declined to answer (refusal). Rephrase the request."


async def run_turns(
    ctx: AgentContext, cfg: LoopConfig, state: TurnState, prompt_index: int | None
) -> RunResult:
    """``prompt_index``: where the prompt answered sits (a refused answer takes it out)."""
    config = cfg.config
    turns = 0
    while True:
        if turns >= config.max_turns:
            cfg.emit(ErrorEvent(
                message=f"Stopped after {turns} turns (max_turns). Send another prompt "
                "to let the agent continue.", code="max_turns",
            ))  # fmt: skip
            return RunResult("idle", "max_turns reached", "max_turns")
        turns += 1
        cfg.emit(StatusEvent(state="thinking"))
        acc = await stream_turn(ctx, cfg, state)
        stop = acc.stop_reason
        if stop == "refusal":
            state.acc = None
            state.open_calls.clear()  # a refused turn is not kept, nor are its tools
            drop_unanswered_prompt(ctx, prompt_index)
            cfg.emit(ErrorEvent(message=REFUSED, code="refusal"))
            return RunResult("idle", "refusal", "refusal")
        content = acc.content()
        if content:
            ctx.messages.append({"role": "assistant", "content": content})
            mark(ctx, cfg)
        state.acc = None
        _report_cut(cfg, acc)
        if stop == "pause_turn":
            continue  # the API resumes the paused turn from the assistant message
        tool_uses = acc.tool_uses()
        # Steering sent while this turn streamed: none of its calls run, it goes now.
        steers = cfg.queue.steers()
        if tool_uses:
            steers += await run_tools(ctx, cfg, state, tool_uses, steered=bool(steers))
        if steers:
            deliver(ctx, cfg, state, steers)
            continue
        if not tool_uses:
            return RunResult("idle")


def _report_cut(cfg: LoopConfig, acc: TurnAccumulator) -> None:
    """An answer cut at max_tokens, or a call whose input was malformed (not run)."""
    if acc.stop_reason == "max_tokens":
        cut = acc.unfinished_tool_names() + acc.invalid_tool_names
        extra = f" The call to {', '.join(cut)} was cut off and not run." if cut else ""
        cfg.emit(ErrorEvent(
            message=f"The response reached max_tokens ({cfg.config.max_tokens}) "
            f"and is incomplete.{extra}", code="max_tokens",
        ))  # fmt: skip
    elif acc.invalid_tool_names:
        names = ", ".join(acc.invalid_tool_names)
        cfg.emit(ErrorEvent(message=f"Ignored a tool call with malformed input ({names}).",
                            code="invalid_tool_input"))  # fmt: skip


async def stream_turn(ctx: AgentContext, cfg: LoopConfig, state: TurnState) -> TurnAccumulator:
    """One model call, streamed: its events emitted as they come, the answer accumulated."""
    await window.fit(ctx, cfg)
    await cfg.may_call()
    messages = compaction.for_request(ctx.messages)
    chars = compaction.size(messages)
    last = ctx.messages[-1] if ctx.messages else None  # the input's end: marked when counted
    messages = await cfg.images.expand(messages)
    config = cfg.config
    request = Request(config.model, config.max_tokens, messages, ctx.system, ctx.tool_specs,
                      config.thinking_budget)  # fmt: skip
    acc = state.acc = TurnAccumulator()
    try:
        async with contextlib.aclosing(cfg.provider.stream(request)) as stream:
            async for raw in stream:
                for event in acc.feed(raw):
                    event = cfg.emit(event)
                    if isinstance(event, ToolCallEvent):
                        state.open_calls[event.id] = event.name
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # API, connection and stream errors end the run as events
        code, message = classify(exc)
        raise RunFailed(code, message) from exc
    finally:
        _report_usage(ctx, cfg, acc, chars, last)
    if acc.stop_reason is None:
        # No message_delta: the connection dropped. A stream that lost only its final
        # message_stop still told us how it ended, so that one is complete.
        raise RunFailed("incomplete_stream", INCOMPLETE)
    return acc


def _report_usage(ctx: AgentContext, cfg: LoopConfig, acc: TurnAccumulator, chars: int,
                  last: dict | None) -> None:  # fmt: skip
    u = acc.usage
    if not (u.input_tokens or u.output_tokens):
        return
    counts = u.counts()
    context = u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
    ctx.counted = (context, chars)
    if last is not None and context:
        last[compaction.MEASURED] = context  # kept with the history for the next prompt
    model = acc.model or cfg.config.model
    cfg.emit(UsageEvent(**counts, cost_usd=cost_usd(model, **counts), context_tokens=context,
                        context_window=cfg.config.context_window))  # fmt: skip
