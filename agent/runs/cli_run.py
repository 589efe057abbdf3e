"""A prompt of a conversation whose agent is an external CLI: an ``Agent``
(``agent/core/agent.py``) like the built-in loop, so the run's writer stores, broadcasts and
renders its events exactly as the loop's. What a CLI cannot do (queue a prompt on a running
one, compact, answer again) it refuses through that same interface.

The prompt goes into the conversation's tmux session; the CLI's structured output comes
back through the provider's parser as ``text``, ``tool_call``, ``tool_result``, ``status``
and ``usage`` events; every prompt ends with one ``idle`` or ``error`` status. Cancel asks
the CLI to stop its turn (its interrupt), and the session stays for the next prompt; a CLI
that does not stop in time is ended and the next prompt resumes its session anew.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from agent.core.cli_agents.session import CliExited
from agent.core.events import (
    ApprovalDecisionEvent,
    ErrorEvent,
    Event,
    StatusEvent,
    UsageEvent,
    UserEvent,
)
from agent.core.images import ImageRef
from agent.core.loop import Guard, NotRunning
from agent.runs.claim import RunRefused
from agent.runs.cli_sessions import sessions

log = logging.getLogger(__name__)

INTERRUPT_GRACE = 8.0  # seconds the CLI has to end its turn after an interrupt


class CliAgent:
    def __init__(self, conversation, emit: Callable[[Event], None], next_seq: int,
                 approval: str = "auto", model: str | None = None,
                 guard: Guard | None = None):  # fmt: skip
        self.conversation = conversation
        self.conversation_id = str(conversation.id)
        self.owner_id = conversation.owner_id
        self.agent = conversation.agent
        self._emit_fn = emit
        self.next_seq = next_seq
        self._task: asyncio.Task | None = None
        self._cancel_requested = False
        # "auto": the CLI runs its tools unasked (in the sandbox); else it asks, and each
        # request becomes an approval card (read_only asks too: the CLI has no such mode).
        self.approval = "auto" if approval == "auto" else "ask"
        self.model = model
        self.guard = guard  # the owner's budget, checked by the gateway before each call
        self._entry = None
        self._parser = None
        self._decided: set[str] = set()
        self._sending: set[asyncio.Task] = set()  # answers to the CLI on their way

    # -- the Agent protocol --------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._task is not None

    @property
    def messages(self) -> list[dict[str, Any]]:
        # The CLI keeps its own history; ours stays as it was (the event log is the record).
        return list(self.conversation.history)

    def cancel(self) -> bool:
        if self._task is None or self._task.done():
            return False
        self._cancel_requested = True
        self._task.cancel()
        return True

    def queue(self, content: str, mode: str, queue_id: str | None = None,
              author: str | None = None, *, images: tuple[ImageRef, ...] = ()) -> str:  # fmt: skip
        if self._task is None:
            raise NotRunning()
        # A CLI takes one prompt at a time (no steering into its turn): 409, said plainly.
        raise RunRefused("prompt_running", "This conversation's agent is a CLI, which takes "
                         "one prompt at a time: wait for it, or stop it.")  # fmt: skip

    def unqueue(self, queue_id: str) -> bool:
        return False

    def drop_from(self, author: str) -> int:
        return 0  # a CLI queues nothing

    def decide(self, call_id: str, decision: str, reason: str | None = None, by: str = "", *,
               approve_all: bool = False) -> str:  # fmt: skip
        """Answer the CLI's permission request for ``call_id``: ``decided``, ``unknown`` or
        ``already``, as the loop's ``decide``."""
        pending = getattr(self._parser, "pending", {})
        if call_id not in pending:
            return "already" if call_id in self._decided else "unknown"
        request_id, call_input = pending.pop(call_id)
        self._decided.add(call_id)
        allow = decision == "approve"
        line = self._entry.provider.approval_response(request_id, allow, call_input, reason)
        self._emit(ApprovalDecisionEvent(id=call_id, decision=decision, by=by,
                                         reason=reason if not allow else None))  # fmt: skip
        self._emit(StatusEvent(state="running_tool" if allow else "thinking"))
        task = asyncio.get_running_loop().create_task(self._entry.session.send(line))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)
        return "decided"

    def _emit(self, event: Event) -> None:
        event = event.with_seq(self.next_seq)
        self.next_seq += 1
        try:
            self._emit_fn(event)
        except Exception:
            log.exception("event handler failed on %s", event.type)

    # -- a prompt ------------------------------------------------------------------------------
    async def prompt(self, content: str | None, author: str | None = None, *,
                     images: tuple[ImageRef, ...] = ()) -> None:  # fmt: skip
        """``images``: refused before a CLI's prompt is claimed (it takes none)."""
        self._task = asyncio.current_task()
        self._cancel_requested = False
        try:
            await self._prompt(content, author)
        finally:
            self._task = None

    async def compact(self) -> None:
        await self.prompt(None)

    async def answer_again(self) -> None:
        """Regenerating an answer (a new branch): the CLI keeps its own history, which
        cannot branch, so it is refused as events (one error status)."""
        self._task = asyncio.current_task()
        try:
            self._not_supported("A CLI agent cannot answer a prompt again: send it anew.")
        finally:
            self._task = None

    def _not_supported(self, message: str) -> None:
        self._emit(ErrorEvent(message=message, code="not_supported"))
        self._emit(StatusEvent(state="error", message="Not supported"))

    async def _prompt(self, content: str | None, author: str | None) -> None:
        if content is None:
            self._not_supported("A CLI agent compacts its own context.")
            return
        self._emit(UserEvent(content=content, author=author))
        self._emit(StatusEvent(state="thinking", message=f"Starting {self.agent}"))
        entry = parser = None
        try:
            entry = await sessions.session_for(self.conversation_id, self.owner_id, self.agent,
                                               self.approval, self.model)  # fmt: skip
            entry.gateway.begin_run(uuid.uuid4().hex, on_usage=self._emit, guard=self.guard)
            parser = entry.provider.parser()
            self._entry, self._parser = entry, parser
            await entry.session.send(entry.provider.prompt_input(content))
            self._emit(StatusEvent(state="thinking"))
            await self._follow(entry, parser)
        except asyncio.CancelledError:
            if not self._cancel_requested:
                self._emit(ErrorEvent(message="Cancelled", code="cancelled"))
                self._emit(StatusEvent(state="error", message="Cancelled"))
                raise  # the server is stopping
            asyncio.current_task().uncancel()
            if entry is not None and parser is not None:
                await self._interrupt(entry, parser)
            self._emit(ErrorEvent(message="Cancelled", code="cancelled"))
            self._emit(StatusEvent(state="error", message="Cancelled"))
            return
        except CliExited as exc:
            await sessions.end(self.conversation_id)
            self._fail(f"{exc}; the next prompt starts it again", "cli_exited")
            return
        except Exception as exc:
            log.exception("CLI agent %s failed", self.agent)
            self._fail(f"The {self.agent} agent could not run: {exc}", "cli_failed")
            return
        finally:
            if entry is not None:
                entry.gateway.end_run()
                entry.session.last_used = time.monotonic()
                if parser is not None:
                    marker = entry.provider.session_marker(parser)
                    with contextlib.suppress(OSError):
                        await asyncio.to_thread(sessions.remember, self.conversation_id, marker)
        if parser.failed:
            self._fail(parser.failed, "cli_error")
        else:
            self._emit(StatusEvent(state="idle"))

    def _fail(self, message: str, code: str) -> None:
        self._emit(ErrorEvent(message=message, code=code))
        self._emit(StatusEvent(state="error", message=message[:200]))

    async def _follow(self, entry, parser) -> None:
        # Through the deployment's gateway, usage is metered there from the upstream's own
        # figures; the CLI's report of it would count every call twice (and could lie).
        metered = entry.gateway.meters
        async for line in entry.session.lines():
            for event in parser.feed(line):
                if not (metered and isinstance(event, UsageEvent)):
                    self._emit(event)
            if parser.finished:
                return

    async def _interrupt(self, entry, parser) -> None:
        """Stop the CLI's turn and read its output to the turn's end (what it did before
        stopping is kept); a CLI that does not stop is ended (its session resumes later)."""
        try:
            await entry.session.interrupt()
            async with asyncio.timeout(INTERRUPT_GRACE):
                await self._follow(entry, parser)
        except Exception:  # it did not stop (or is gone): end it
            log.warning("%s did not stop its turn when interrupted; ending it", self.agent)
            await sessions.end(self.conversation_id)
