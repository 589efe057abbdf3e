"""The context window as a transform before each model call: when the history reaches
``compact_at`` of the window, the older messages are summarised (``agent/core/compaction.py``
decides what is cut and kept); when even then the answer has no room, the run ends with a
clear error. A compaction asked for by the user goes through here too."""

from __future__ import annotations

import asyncio

from agent.core import compaction
from agent.core.errors import classify
from agent.core.events import CompactionEvent, ErrorEvent, UsageEvent
from agent.core.loop.context import AgentContext
from agent.core.loop.hooks import LoopConfig
from agent.core.loop.types import KEEP_EXCHANGES, RunFailed, RunResult
from agent.core.model.provider import Request
from agent.core.pricing import cost_usd

TOO_LARGE = (
    "The conversation does not fit the model's context window even after compaction (the "
    "latest exchange alone is too large). Start a new conversation or ask for a smaller step."
)


def estimate(ctx: AgentContext) -> int:
    """Tokens the history will take: scaled from the last call's count, or estimated."""
    system = len(ctx.system or "")
    chars = compaction.size(ctx.messages) + system
    if ctx.counted is not None and ctx.counted[1]:
        tokens, counted_chars = ctx.counted
        return int(tokens * chars / (counted_chars + system))
    return int(chars / compaction.CHARS_PER_TOKEN) + 1_000  # + tools, roughly


def chars_per_token(ctx: AgentContext) -> float:
    """As the last measured call ran (code, JSON and other languages run dense), else the
    estimate's."""
    if ctx.counted is not None and ctx.counted[0] and ctx.counted[1]:
        tokens, counted_chars = ctx.counted
        return (counted_chars + len(ctx.system or "")) / tokens
    return compaction.CHARS_PER_TOKEN


async def fit(ctx: AgentContext, cfg: LoopConfig) -> None:
    window = cfg.config.context_window
    if estimate(ctx) < cfg.config.compact_at * window:
        return
    await compact(ctx, cfg)
    if estimate(ctx) + cfg.config.max_tokens > window:
        raise RunFailed("context_too_large", TOO_LARGE)


async def compact_requested(ctx: AgentContext, cfg: LoopConfig) -> RunResult:
    if not await compact(ctx, cfg, keep_exchanges=KEEP_EXCHANGES):
        cfg.emit(ErrorEvent(message="Nothing to compact yet: the conversation is still short.",
                            code="nothing_to_compact"))  # fmt: skip
    return RunResult("idle")


async def compact(ctx: AgentContext, cfg: LoopConfig, keep_exchanges: int = 0) -> bool:
    """Summarise the older messages (a non-streamed call, metered); False when there is
    nothing before the recent ones to summarise."""
    config = cfg.config
    # What is kept is sized in tokens: a share of the window, in characters as measured.
    keep_chars = int(config.context_window * compaction.KEEP_SHARE * chars_per_token(ctx))
    cut = compaction.cut_point(ctx.messages, keep_chars, keep_exchanges)
    if cut is None:
        return False
    older = ctx.messages[:cut]
    before = estimate(ctx)
    request = Request(config.model, compaction.SUMMARY_MAX_TOKENS,
                      compaction.summary_messages(older), ctx.system)  # fmt: skip
    await cfg.may_call()
    try:
        answer = await cfg.provider.complete(request)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        code, message = classify(exc)
        raise RunFailed(code, f"Compaction failed: {message}") from exc
    counts = answer.usage.counts()
    cfg.emit(UsageEvent(**counts, cost_usd=cost_usd(config.model, **counts)))
    if not answer.text:
        raise RunFailed("compaction_failed", "Compaction failed: the summary was empty.")
    ratio = chars_per_token(ctx) if ctx.counted is not None else None
    ctx.messages = compaction.compacted(ctx.messages, cut, answer.text)
    ctx.counted = None  # the count was of the history before; its density still holds:
    if ratio is not None:
        chars = compaction.size(compaction.for_request(ctx.messages))
        ctx.counted = (max(1, int((chars + len(ctx.system or "")) / ratio)), chars)
    cfg.emit(CompactionEvent(
        summary=answer.text, through_seq=compaction.through_seq(older),
        tokens_before=before, tokens_after=estimate(ctx),
    ))  # fmt: skip
    return True
