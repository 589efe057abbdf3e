"""The agent loop (seed 001) as an asyncio library.

``AgentLoop.prompt`` streams a response, runs the tools it asks for one by one (fail-fast),
sends the results back and repeats until the model stops calling tools, ``max_turns`` is
reached, the run is cancelled or an error occurs. While it runs, prompts can be queued
(interfaces §8): a steer is delivered after the tool that is executing (the turn's other
calls are not run) or at the end of the turn being streamed; a follow-up when the agent
would otherwise stop, one at a time, in the same run. Everything is reported through ``emit``
as events; a run ends with exactly one ``status`` of state idle or error, never with an
exception (except a cancellation that came from outside the harness, which propagates).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from agent.core import compaction, history
from agent.core import images as images_mod
from agent.core.config import GATED_TOOLS, Config
from agent.core.errors import classify
from agent.core.events import (
    QUEUE_MODES,
    USAGE_FIELDS,
    ApprovalDecisionEvent,
    ApprovalEvent,
    CompactionEvent,
    ErrorEvent,
    Event,
    QueuedEvent,
    StatusEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    UnqueuedEvent,
    UsageEvent,
    UserEvent,
)
from agent.core.images import ImageRef
from agent.core.instructions import DirectoryInstructions
from agent.core.model import wire
from agent.core.model.accumulator import TurnAccumulator
from agent.core.pricing import cost_usd
from agent.core.tools.base import Tool, ToolResult, fail, tool_spec
from agent.core.tools.workspace import os_error_message

log = logging.getLogger(__name__)

Emit = Callable[[Event], None]


class PromptAlreadyRunning(RuntimeError):
    def __init__(self) -> None:
        super().__init__("a prompt is already running; wait for it or cancel it")


class NotRunning(RuntimeError):
    """A prompt was queued on a loop that runs none (it may have just finished)."""


class QueueFull(RuntimeError):
    pass


class CallRefused(Exception):  # noqa: N818 - a refusal, raised like one
    """Raised by a loop's ``guard`` to refuse a model call (the owner's budget is spent):
    nothing is asked of the model and the run ends with an error of ``code``."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


# Awaited before each model call that costs (a turn, a compaction); raises CallRefused.
Guard = Callable[[], Awaitable[None]]


MAX_QUEUED = 20  # prompts waiting in one run's queue
STEERED = "not run: the user sent a steering message before this call ran"


@dataclass(frozen=True, slots=True)
class QueuedPrompt:
    id: str
    content: str
    mode: str  # steer | follow_up
    author: str = ""  # who sent it, on a shared conversation
    images: tuple[ImageRef, ...] = ()  # attached to it (interfaces §13)


@dataclass(frozen=True, slots=True)
class RunResult:
    state: Literal["idle", "error"]
    message: str | None = None
    code: str | None = None


class _RunFailed(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True, slots=True)
class Decision:
    """The user's decision on a tool call waiting for approval (interfaces §9)."""

    decision: Literal["approve", "deny"]
    reason: str | None = None
    by: str = ""


# Asks for a decision on a call (``{"id", "name", "input"}``): the CLI's terminal. Without
# one, the loop waits on a future that ``decide`` resolves (no thread, nothing held).
Approver = Callable[[dict[str, Any]], Awaitable[Decision]]
DECISIONS = ("approve", "deny")


def denied_message(reason: str | None) -> str:
    reason = (reason or "").strip()
    return "denied by the user" + (f": {reason}" if reason else " (no reason given)")


KEEP_EXCHANGES = 2  # a compaction asked for keeps the last exchanges as they are


class AgentLoop:
    def __init__(
        self,
        client: Any,
        tools: list[Tool],
        config: Config,
        emit: Emit | None = None,
        *,
        system: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        next_seq: int = 1,
        instructions: DirectoryInstructions | None = None,
        approver: Approver | None = None,
        images: images_mod.Loader | None = None,
        guard: Guard | None = None,
    ):
        self.client = client
        # Checked before every call, not once per prompt: follow-ups, steers and
        # compactions spend within the same run (a budget checked at its start only was
        # spent many times over).
        self.guard = guard
        if config.approval == "read_only":  # the tools that change things are not offered
            tools = [tool for tool in tools if tool.name not in GATED_TOOLS]
        self.tools = {tool.name: tool for tool in tools}
        self._tool_specs = [tool_spec(tool) for tool in tools]
        self.config = config
        self.system = system
        self._emit_fn = emit
        self._messages: list[dict[str, Any]] = history.repair(list(messages or []))
        self.next_seq = next_seq
        self.instructions = instructions  # a subdirectory's AGENTS.md, when first touched
        # The last call's input as the API counted it, and the characters it was made of:
        # the estimate of the next call's (compaction decides by it).
        self._context: tuple[int, int] | None = None
        self._task: asyncio.Task | None = None
        self._cancel_requested = False
        # State of the turn in progress, so an abnormal end can keep what was produced.
        self._acc: TurnAccumulator | None = None
        self._open_calls: dict[str, str] = {}  # tool_use id -> name, emitted without result
        self._results: list[dict[str, Any]] = []
        self._queue: list[QueuedPrompt] = []  # prompts sent while running, in order
        self._prompt_index = 0  # where the prompt being answered sits in the history
        # Tool approval (interfaces §9): the calls waiting for a decision, those decided in
        # this run, and "approve all for this run".
        self.approver = approver
        self._pending: dict[str, asyncio.Future[Decision]] = {}
        self._decided: set[str] = set()
        self._approve_all = False
        # Attached images' data, by sha256 (``images.Loader``): loaded once per loop.
        self._load_images = images
        self._image_data: dict[str, str] = {}
        self._delivered_images: set[str] = set()  # attached to this run's prompts

    # -- public API ------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._task is not None

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation history as sent to the API (a copy)."""
        return list(self._messages)

    def cancel(self) -> bool:
        """Cancel the running prompt; a no-op (False) when idle."""
        if self._task is None or self._task.done():
            return False
        self._cancel_requested = True
        self._task.cancel()
        return True

    @property
    def queued(self) -> list[QueuedPrompt]:
        return list(self._queue)

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
        if mode not in QUEUE_MODES:
            raise ValueError(f"unknown queue mode {mode!r}")
        if self._task is None or self._task.done():
            raise NotRunning("no prompt is running")
        if len(self._queue) >= MAX_QUEUED:
            raise QueueFull(f"{MAX_QUEUED} prompts are queued already")
        item = QueuedPrompt(queue_id or uuid.uuid4().hex, content, mode, author or "", images)
        self._queue.append(item)
        self._emit(QueuedEvent(id=item.id, content=content, mode=item.mode, author=author or None))
        return item.id

    def unqueue(self, queue_id: str) -> bool:
        """Take a queued prompt out (an ``unqueued`` event); False when there is no such
        prompt in the queue (unknown, or delivered already)."""
        for index, item in enumerate(self._queue):
            if item.id == queue_id:
                del self._queue[index]
                self._emit(UnqueuedEvent(id=queue_id, reason="removed"))
                return True
        return False

    def drop_from(self, author: str) -> int:
        """Take out every queued prompt of ``author`` (who lost access to the conversation:
        what they queued must not run in the owner's workspace); how many went."""
        gone = [item for item in self._queue if item.author == author]
        self._queue = [item for item in self._queue if item.author != author]
        for item in gone:
            self._emit(UnqueuedEvent(id=item.id, reason="access_lost"))
        return len(gone)

    @property
    def pending_approvals(self) -> list[str]:
        return list(self._pending)

    def decide(
        self,
        call_id: str,
        decision: str,
        reason: str | None = None,
        by: str = "",
        *,
        approve_all: bool = False,
    ) -> str:
        """Decide on a call waiting for approval: ``decided``; ``unknown`` when no such
        call waits; ``already`` when it was decided before. ``approve_all`` also approves
        every later call of this run."""  # fmt: skip
        if decision not in DECISIONS:
            raise ValueError(f"unknown decision {decision!r}")
        future = self._pending.get(call_id)
        if future is None:
            return "already" if call_id in self._decided else "unknown"
        if future.done():
            return "already"
        if approve_all and decision == "approve":
            self._approve_all = True
        future.set_result(Decision(decision, reason if decision == "deny" else None, by))
        return "decided"

    async def prompt(
        self,
        content: str | None,
        author: str | None = None,
        *,
        again: bool = False,
        images: tuple[ImageRef, ...] = (),
    ) -> RunResult:
        """Run a prompt to its end (queued prompts included); ``None`` compacts the history
        instead (a compaction asked for: interfaces §10); ``again``: answer the prompt the
        history ends with once more, with no new ``user`` event (a regenerated answer,
        §11). Ends with one idle or error status either way. ``author``: who sent it,
        carried by its ``user`` event; ``images``: attached to it (their data comes from the
        loop's image loader)."""
        if self._task is not None:
            raise PromptAlreadyRunning()
        self._task = asyncio.current_task()
        self._cancel_requested = False
        self._decided.clear()
        self._approve_all = False
        self._delivered_images = set()
        try:
            prompt = None
            if content is not None and not again:
                prompt = QueuedPrompt("", content, "", author or "", tuple(images))
            return await self._run(prompt, again)
        finally:
            self._task = None
            self._acc = None
            self._open_calls.clear()
            self._results = []
            self._queue.clear()
            self._pending.clear()

    # -- the loop --------------------------------------------------------------------
    def _emit(self, event: Event) -> Event:
        event = event.with_seq(self.next_seq)
        self.next_seq += 1
        if self._emit_fn is not None:
            try:
                self._emit_fn(event)
            except Exception:  # a broken handler must not break the run
                log.exception("event handler failed on %s", event.type)
        return event

    async def compact(self) -> RunResult:
        return await self.prompt(None)

    async def answer_again(self) -> RunResult:
        return await self.prompt(None, again=True)

    async def _run(self, prompt: QueuedPrompt | None, again: bool = False) -> RunResult:
        """``prompt``: the one that starts the run (None: a compaction, or ``again``)."""
        if again:
            self._prompt_index = None  # the prompt is an earlier event's: never dropped
        elif prompt is None:
            self._prompt_index = None
            self._emit(StatusEvent(state="thinking", message="Compacting"))
        else:
            self._deliver([prompt])
        try:
            if again:
                result = await self._loop(-1)
            elif prompt is None:
                result = await self._compact_requested()
            else:
                result = await self._loop(self._prompt_index)
            while next_prompts := self._next_queued():
                # The agent would stop here: what was queued goes on in this run.
                self._deliver(next_prompts)
                result = await self._loop(self._prompt_index)
        except asyncio.CancelledError:
            self._close_turn("cancelled by the user before it ran")
            self._drop_queue("cancelled" if self._cancel_requested else "not_sent")
            self._emit(ErrorEvent(message="Cancelled", code="cancelled"))
            self._emit(StatusEvent(state="error", message="Cancelled"))
            task = asyncio.current_task()
            if not self._cancel_requested and task is not None:
                raise  # cancelled from outside (shutdown): let it propagate
            if task is not None:
                task.uncancel()
            return RunResult("error", "Cancelled", "cancelled")
        except _RunFailed as failure:
            self._close_turn(f"not run: {failure.message}")
            if self._prompt_index is not None:
                self._drop_unanswered_prompt(self._prompt_index)
            if self._delivered_images:  # (a refused image must not fail every later request)
                self._messages[:] = images_mod.named(self._messages, self._delivered_images)
            self._drop_queue("not_sent")
            self._emit(ErrorEvent(message=failure.message, code=failure.code))
            self._emit(StatusEvent(state="error", message=failure.message))
            return RunResult("error", failure.message, failure.code)
        self._emit(StatusEvent(state="idle"))
        return result

    # -- the queue -------------------------------------------------------------------
    def _deliver(self, prompts: list[QueuedPrompt]) -> None:
        """Prompts join the history as one user message (after the tool results, if any,
        of the turn they follow), each a ``user`` event."""
        self._prompt_index = len(self._messages)
        blocks = []
        for item in prompts:
            attached = [image.to_dict() for image in item.images] or None
            self._emit(UserEvent(content=item.content, mode=item.mode or None,
                                 author=item.author or None, images=attached))  # fmt: skip
            blocks.extend(images_mod.prompt_blocks(item.content, item.images))
            self._delivered_images.update(image.sha256 for image in item.images)
        history.append_user_blocks(self._messages, blocks)
        self._mark()

    def _steers(self) -> list[QueuedPrompt]:
        """The steering prompts waiting, taken out of the queue."""
        steers = [item for item in self._queue if item.mode == "steer"]
        if steers:
            self._queue = [item for item in self._queue if item.mode != "steer"]
        return steers

    def _next_queued(self) -> list[QueuedPrompt]:
        """When the agent would stop: every steer waiting, else the first follow-up."""
        steers = self._steers()
        if steers or not self._queue:
            return steers
        return [self._queue.pop(0)]

    def _drop_queue(self, reason: str) -> None:
        queue, self._queue = self._queue, []
        for item in queue:
            self._emit(UnqueuedEvent(id=item.id, reason=reason))

    async def _loop(self, prompt_index: int) -> RunResult:
        turns = 0
        while True:
            if turns >= self.config.max_turns:
                self._emit(ErrorEvent(
                    message=f"Stopped after {turns} turns (max_turns). Send another prompt "
                    "to let the agent continue.", code="max_turns",
                ))  # fmt: skip
                return RunResult("idle", "max_turns reached", "max_turns")
            turns += 1
            self._emit(StatusEvent(state="thinking"))
            acc = await self._stream_turn()
            stop = acc.stop_reason
            if stop == "refusal":
                self._acc = None
                self._open_calls.clear()  # a refused turn is not kept, nor are its tools
                self._drop_unanswered_prompt(prompt_index)
                self._emit(ErrorEvent(
                    message="The model declined to answer (refusal). Rephrase the request.",
                    code="refusal",
                ))  # fmt: skip
                return RunResult("idle", "refusal", "refusal")
            content = acc.content()
            if content:
                self._messages.append({"role": "assistant", "content": content})
                self._mark()
            self._acc = None
            if stop == "max_tokens":
                cut = acc.unfinished_tool_names() + acc.invalid_tool_names
                extra = f" The call to {', '.join(cut)} was cut off and not run." if cut else ""
                self._emit(ErrorEvent(
                    message=f"The response reached max_tokens ({self.config.max_tokens}) "
                    f"and is incomplete.{extra}", code="max_tokens",
                ))  # fmt: skip
            elif acc.invalid_tool_names:
                names = ", ".join(acc.invalid_tool_names)
                self._emit(ErrorEvent(
                    message=f"Ignored a tool call with malformed input ({names}).",
                    code="invalid_tool_input",
                ))  # fmt: skip
            if stop == "pause_turn":
                continue  # the API resumes the paused turn from the assistant message
            tool_uses = acc.tool_uses()
            # Steering sent while this turn streamed: none of its calls run, it goes now.
            steers = self._steers()
            if tool_uses:
                steers += await self._run_tools(tool_uses, steered=bool(steers))
            if steers:
                self._deliver(steers)
                continue
            if not tool_uses:
                return RunResult("idle")

    async def _stream_turn(self) -> TurnAccumulator:
        await self._fit_context()
        await self._may_call()
        messages = compaction.for_request(self._messages)
        chars = compaction.size(messages)
        if shas := images_mod.references(messages):
            messages = images_mod.expand(messages, await self._images(shas))
        request: dict[str, Any] = {
            "model": self.config.model,
            "max_tokens": self.config.max_tokens,
            "messages": messages,
            "stream": True,
        }
        if self.system:
            request["system"] = self.system
        if self._tool_specs:
            request["tools"] = self._tool_specs
            request["tool_choice"] = {"type": "auto"}
        if self.config.thinking_budget:
            request["thinking"] = {
                "type": "enabled",
                "budget_tokens": self.config.thinking_budget,
            }
        acc = self._acc = TurnAccumulator()
        stream = None
        try:
            stream = await self.client.messages.create(**request)
            async for raw in wire.events(stream):
                for event in acc.feed(raw):
                    event = self._emit(event)
                    if isinstance(event, ToolCallEvent):
                        self._open_calls[event.id] = event.name
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # API, connection and stream errors end the run as events
            code, message = classify(exc)
            raise _RunFailed(code, message) from exc
        finally:
            if stream is not None and hasattr(stream, "close"):
                with contextlib.suppress(Exception):
                    await asyncio.shield(stream.close())
            self._report_usage(acc, chars)
        if acc.stop_reason is None:
            # No message_delta: the connection dropped. A stream that lost only its final
            # message_stop still told us how it ended, so that one is complete.
            raise _RunFailed(
                "incomplete_stream", "The response stream ended before the message was complete."
            )
        return acc

    async def _may_call(self) -> None:
        """The guard's word before a model call: a refusal ends the run as an error (the
        prompt that would have been answered is taken back out of the history)."""
        if self.guard is None:
            return
        try:
            await self.guard()
        except CallRefused as refused:
            raise _RunFailed(refused.code, refused.message) from refused

    async def _images(self, shas: list[str]) -> dict[str, str]:
        """The attached images' data (base64) by sha256; those the loader no longer has
        (or no loader: the command line) are left out, and the request says so."""
        missing = [sha for sha in shas if sha not in self._image_data]
        if missing and self._load_images is not None:
            try:
                self._image_data.update(await self._load_images(missing))
            except Exception:  # a failed load must not end the run: they are named instead
                log.exception("loading attached images failed")
        return self._image_data

    def _report_usage(self, acc: TurnAccumulator, chars: int) -> None:
        u = acc.usage
        if not (u.input_tokens or u.output_tokens):
            return
        counts = {name: getattr(u, name) for name in USAGE_FIELDS}
        context = u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
        self._context = (context, chars)
        model = acc.model or self.config.model
        self._emit(UsageEvent(**counts, cost_usd=cost_usd(model, **counts),
                              context_tokens=context,
                              context_window=self.config.context_window))  # fmt: skip

    # -- the context window ----------------------------------------------------------------
    def _mark(self) -> None:
        """Note on the newest message the seq of the last event it came with (a compaction
        says which events its summary replaced)."""
        if self._messages:
            self._messages[-1]["_seq"] = self.next_seq - 1

    def _estimate(self) -> int:
        """Tokens the history will take: scaled from the last call's count, or estimated."""
        chars = compaction.size(self._messages) + len(self.system or "")
        if self._context is not None and self._context[1]:
            tokens, counted_chars = self._context
            return int(tokens * chars / (counted_chars + len(self.system or "")))
        return int(chars / compaction.CHARS_PER_TOKEN) + 1_000  # + tools, roughly

    async def _fit_context(self) -> None:
        """Compact when the history reaches ``compact_at`` of the window; when it still
        does not leave room for the answer, end the run with a clear error."""
        window = self.config.context_window
        if self._estimate() < self.config.compact_at * window:
            return
        await self._compact()
        if self._estimate() + self.config.max_tokens > window:
            raise _RunFailed(
                "context_too_large",
                "The conversation does not fit the model's context window even after "
                "compaction (the latest exchange alone is too large). Start a new "
                "conversation or ask for a smaller step.",
            )

    async def _compact_requested(self) -> RunResult:
        if not await self._compact(keep_exchanges=KEEP_EXCHANGES):
            self._emit(ErrorEvent(message="Nothing to compact yet: the conversation is still "
                                  "short.", code="nothing_to_compact"))  # fmt: skip
        return RunResult("idle")

    async def _compact(self, keep_exchanges: int = 0) -> bool:
        """Summarise the older messages (a non-streamed call, metered); False when there is
        nothing before the recent ones to summarise."""
        keep_chars = int(self.config.context_window * compaction.KEEP_SHARE
                         * compaction.CHARS_PER_TOKEN)  # fmt: skip
        cut = compaction.cut_point(self._messages, keep_chars, keep_exchanges)
        if cut is None:
            return False
        older = self._messages[:cut]
        before = self._estimate()
        request: dict[str, Any] = {
            "model": self.config.model,
            "max_tokens": compaction.SUMMARY_MAX_TOKENS,
            "messages": compaction.summary_messages(older),
        }
        if self.system:
            request["system"] = self.system
        await self._may_call()
        try:
            response = await self.client.messages.create(**request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            code, message = classify(exc)
            raise _RunFailed(code, f"Compaction failed: {message}") from exc
        summary = compaction.summary_text(response)
        usage = response.get("usage") if isinstance(response, dict) else response.usage
        counts = {name: (usage.get(name) if isinstance(usage, dict) else getattr(usage, name, 0))
                  or 0 for name in USAGE_FIELDS}  # fmt: skip
        self._emit(UsageEvent(**counts, cost_usd=cost_usd(self.config.model, **counts)))
        if not summary:
            raise _RunFailed("compaction_failed", "Compaction failed: the summary was empty.")
        self._messages = compaction.compacted(self._messages, cut, summary)
        self._context = None  # the count was of the history before
        self._emit(CompactionEvent(
            summary=summary, through_seq=compaction.through_seq(older),
            tokens_before=before, tokens_after=self._estimate(),
        ))  # fmt: skip
        return True

    async def _run_tools(
        self, tool_uses: list[dict[str, Any]], *, steered: bool = False
    ) -> list[QueuedPrompt]:
        """Run tools in order; after the first error the rest are skipped (fail-fast), and
        once the user steered (``steered``, or a steer queued while a tool ran) the rest
        are not run; each still gets a tool_result, as the API requires. Returns the
        steering prompts taken from the queue."""
        self._results = []
        failed = False
        steers: list[QueuedPrompt] = []
        for use in tool_uses:
            notes = None
            if steered or steers:
                result = fail(STEERED)
            elif failed:
                result = fail("skipped: an earlier tool call in this turn failed")
            else:
                decision = await self._approval(use)
                if decision is not None and decision.decision == "deny":
                    result = fail(denied_message(decision.reason))
                else:
                    self._emit(StatusEvent(state="running_tool", message=use["name"]))
                    result = await self._execute(use)
                failed = result.is_error
                if not failed and self.instructions is not None:
                    notes = await self._instructions_after(use)
                steers = self._steers()
            self._record_result(use["id"], result, notes)
        history.append_user_blocks(self._messages, self._results)
        self._mark()
        self._results = []
        return steers

    async def _approval(self, use: dict[str, Any]) -> Decision | None:
        """In ``ask``, a call to a tool that changes things waits for a decision (an
        ``approval`` event, a ``waiting_input`` status); None: it needs none."""
        if (self.config.approval != "ask" or use["name"] not in GATED_TOOLS
                or use["name"] not in self.tools or self._approve_all):  # fmt: skip
            return None
        call_id = use["id"]
        display = await self._preview(use)
        self._emit(ApprovalEvent(id=call_id, name=use["name"], input=use["input"],
                                 display=display))  # fmt: skip
        message = f"Waiting for approval: {use['name']}"
        self._emit(StatusEvent(state="waiting_input", message=message))
        if self.approver is not None:
            call = {"id": call_id, "name": use["name"], "input": use["input"]}
            decision = await self.approver(call)
        else:
            future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
            self._pending[call_id] = future
            try:
                decision = await future
            finally:
                self._pending.pop(call_id, None)
        self._decided.add(call_id)
        self._emit(ApprovalDecisionEvent(id=call_id, decision=decision.decision,
                                         reason=decision.reason, by=decision.by))  # fmt: skip
        return decision

    async def _preview(self, use: dict[str, Any]) -> dict[str, Any] | None:
        """What a tool would do, read only (an edit's diff), for the approval card."""
        preview = getattr(self.tools[use["name"]], "preview", None)
        if preview is None:
            return None
        try:
            return await preview(use["input"])
        except asyncio.CancelledError:
            raise
        except Exception:  # a preview that cannot be made must not fail the call
            log.exception("could not preview %s", use["name"])
            return None

    async def _execute(self, use: dict[str, Any]) -> ToolResult:
        tool = self.tools.get(use["name"])
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

    async def _instructions_after(self, use: dict[str, Any]) -> str | None:
        try:
            return await self.instructions.after_tool(use["name"], use["input"])
        except asyncio.CancelledError:
            raise
        except Exception:  # instructions that cannot be read must not fail the call
            log.exception("could not read the instructions for %s", use["name"])
            return None

    def _record_result(
        self, tool_use_id: str, result: ToolResult, notes: str | None = None
    ) -> None:
        """The result for the model (with a directory's instructions beside it, as a second
        text block: the result itself stays the tool's JSON) and as an event."""
        self._open_calls.pop(tool_use_id, None)
        content: Any = result.content
        if notes:
            content = [{"type": "text", "text": result.content}, {"type": "text", "text": notes}]
        self._results.append({
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": content,
            "is_error": result.is_error,
        })  # fmt: skip
        self._emit(ToolResultEvent(
            id=tool_use_id, result=result.content, isError=result.is_error, display=result.display,
        ))  # fmt: skip

    # -- abnormal ends -----------------------------------------------------------------
    def _close_turn(self, reason: str) -> None:
        """Keep what a cut-short turn produced and leave a valid history behind."""
        acc, self._acc = self._acc, None
        if acc is not None:  # cut off while streaming
            content = acc.content()
            partial = acc.unfinished_text()
            if partial:
                self._emit(TextEvent(content=partial))
                content.append({"type": "text", "text": partial})
            if content:
                self._messages.append({"role": "assistant", "content": content})
        for tool_use_id in list(self._open_calls):
            self._record_result(tool_use_id, fail(reason))
        if self._results:
            history.append_user_blocks(self._messages, self._results)
            self._results = []
        self._messages[:] = history.repair(self._messages, reason)

    def _drop_unanswered_prompt(self, prompt_index: int) -> None:
        """A prompt that got no answer at all is taken out of the history (it stays in the
        event log): the next prompt, or a retry, must not be doubled with it."""
        if len(self._messages) == prompt_index + 1 and self._messages[-1]["role"] == "user":
            self._messages.pop()
