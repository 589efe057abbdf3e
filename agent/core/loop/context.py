"""The context a run works on: what the model is given (system prompt, tools, history) and
the state of the turn in progress, with the functions that keep the history valid."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.core import compaction, history
from agent.core import images as images_mod
from agent.core.config import CHANGING_TOOLS
from agent.core.events import TextEvent, ToolResultEvent, UserEvent
from agent.core.loop.hooks import LoopConfig
from agent.core.loop.types import QueuedPrompt
from agent.core.model.accumulator import TurnAccumulator
from agent.core.tools.base import Tool, ToolResult, fail, tool_spec


@dataclass(slots=True)
class AgentContext:
    system: str | None
    tools: dict[str, Tool]
    tool_specs: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    # The last call's input as the API counted it, and the characters it was made of:
    # the estimate of the next call's (compaction decides by it).
    counted: tuple[int, int] | None = None

    @classmethod
    def of(
        cls,
        tools: list[Tool],
        approval: str,
        system: str | None,
        messages: list[dict[str, Any]] | None,
    ) -> AgentContext:
        if approval == "read_only":  # the tools that change things are not offered
            tools = [tool for tool in tools if tool.name not in CHANGING_TOOLS]
        kept = history.repair(list(messages or []))
        return cls(system, {tool.name: tool for tool in tools},
                   [tool_spec(tool) for tool in tools], kept,
                   compaction.measured(kept))  # fmt: skip


@dataclass(slots=True)
class TurnState:
    """A run's state, so an abnormal end can keep what was produced."""

    acc: TurnAccumulator | None = None  # the turn streaming
    open_calls: dict[str, str] = field(default_factory=dict)  # id -> name, without result
    executing: str | None = None  # the open call whose tool runs now
    results: list[dict[str, Any]] = field(default_factory=list)  # tool_results not yet sent
    prompt_index: int | None = None  # where the prompt being answered sits in the history
    delivered_images: set[str] = field(default_factory=set)  # attached to this run's prompts


def mark(ctx: AgentContext, cfg: LoopConfig) -> None:
    """Note on the newest message the seq of the last event it came with (a compaction
    says which events its summary replaced)."""
    if ctx.messages:
        ctx.messages[-1]["_seq"] = cfg.emit.next_seq - 1


def deliver(
    ctx: AgentContext, cfg: LoopConfig, state: TurnState, prompts: list[QueuedPrompt]
) -> None:
    """Prompts join the history as one user message (after the tool results, if any, of the
    turn they follow), each a ``user`` event."""
    state.prompt_index = len(ctx.messages)
    blocks = []
    for item in prompts:
        attached = [image.to_dict() for image in item.images] or None
        cfg.emit(UserEvent(content=item.content, mode=item.mode or None,
                           author=item.author or None, images=attached))  # fmt: skip
        blocks.extend(images_mod.prompt_blocks(item.content, item.images))
        state.delivered_images.update(image.sha256 for image in item.images)
    history.append_user_blocks(ctx.messages, blocks)
    mark(ctx, cfg)


def record_result(
    cfg: LoopConfig,
    state: TurnState,
    tool_use_id: str,
    result: ToolResult,
    notes: str | None = None,
) -> None:
    """The result for the model (with a directory's instructions beside it, as a second
    text block: the result itself stays the tool's JSON) and as an event."""
    state.open_calls.pop(tool_use_id, None)
    content: Any = result.content
    if notes:
        content = [{"type": "text", "text": result.content}, {"type": "text", "text": notes}]
    state.results.append({
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": content,
        "is_error": result.is_error,
    })  # fmt: skip
    cfg.emit(ToolResultEvent(
        id=tool_use_id, result=result.content, isError=result.is_error, display=result.display,
    ))  # fmt: skip


def send_results(ctx: AgentContext, cfg: LoopConfig, state: TurnState) -> None:
    """The turn's tool results join the history as its next user message."""
    history.append_user_blocks(ctx.messages, state.results)
    mark(ctx, cfg)
    state.results = []


def close_turn(ctx: AgentContext, cfg: LoopConfig, state: TurnState, reason: str,
               running: str | None = None) -> None:  # fmt: skip
    """Keep what a cut-short turn produced and leave a valid history behind. ``reason``:
    the result of each call left open; ``running``: of the one whose tool was running (it
    did run, perhaps for long: "before it ran" would mislead the model and the user)."""
    acc, state.acc = state.acc, None
    if acc is not None:  # cut off while streaming
        content = acc.content()
        partial = acc.unfinished_text()
        if partial:
            cfg.emit(TextEvent(content=partial))
            content.append({"type": "text", "text": partial})
        if content:
            ctx.messages.append({"role": "assistant", "content": content})
    for tool_use_id in list(state.open_calls):
        ran = running is not None and tool_use_id == state.executing
        record_result(cfg, state, tool_use_id, fail(running if ran else reason))
    state.executing = None
    if state.results:
        history.append_user_blocks(ctx.messages, state.results)
        state.results = []
    ctx.messages[:] = history.repair(ctx.messages, reason)


def drop_unanswered_prompt(ctx: AgentContext, prompt_index: int | None) -> None:
    """A prompt that got no answer at all is taken out of the history (it stays in the
    event log): the next prompt, or a retry, must not be doubled with it."""
    if prompt_index is None:
        return
    messages = ctx.messages
    if len(messages) == prompt_index + 1 and messages[-1]["role"] == "user":
        messages.pop()
