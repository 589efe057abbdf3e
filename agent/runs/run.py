"""One prompt's run in the server process: the agent loop, and the writer that stores its
events (batched) and broadcasts them to the conversation's viewers.

A run belongs to the process, not to a browser connection: sockets come and go, the run
goes on. Events stay typed here; the event log and the broadcast turn them into JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time

from django.conf import settings

from agent.core.agent import Agent
from agent.core.events import (
    CheckpointEvent,
    CompactionEvent,
    ErrorEvent,
    Event,
    StatusEvent,
    TextDeltaEvent,
    TextEvent,
    ToolResultEvent,
    UsageEvent,
)
from agent.core.tools import Workspace
from agent.models import Conversation
from agent.runs import eventlog
from agent.runs.agents import agent_for
from agent.runs.broadcast import broadcast
from agent.runs.checkpoints import Checkpointer
from agent.runs.claim import Setup, finish, renew_lease
from agent.runs.inbox import Inbox
from agent.runs.pacing import loop_lag, partial_save_due, save_phase
from agent.runs.projects import in_project
from agent.runs.spend import SpendGuard
from agent.server import metrics

log = logging.getLogger(__name__)

# Frames of text deltas are coalesced over an interval that adapts to the process's load
# (agent/runs/pacing.py): at once when idle, spaced out when the event loop runs late.
# Their partial text is stored once a second, on a tick of one of ten phases
# (pacing.partial_save_due).

# A run whose events cannot be stored is ended (agent/runs/eventlog.py storage_full): its
# transcript would silently lose everything from then on.
STORAGE_FULL_MESSAGE = (
    "The server's disk is full, so this conversation could not be saved and the prompt was "
    "stopped. What was saved before is kept; send the prompt again once space is freed."
)
STORAGE_ERROR_MESSAGE = (
    "The server could not save this conversation (its database keeps failing), so the prompt "
    "was stopped. What was saved before is kept; try again in a moment."
)
STORE_ATTEMPTS = 3  # consecutive failed stores (of any other cause) that end a run
FINISH_RETRIES = (0.0, 1.0, 2.0, 4.0)  # seconds before each try of the final save
# Events after which the run's history changed: stored with them, so a crash loses none
# of the conversation.
HISTORY_CHANGES = (StatusEvent, TextEvent, ToolResultEvent, CompactionEvent)


def _only_deltas(batch: list[Event]) -> bool:
    return all(isinstance(event, TextDeltaEvent) for event in batch)


# Notices of the moment, not of the conversation: sent to the pages on it, never stored, so
# a reload does not bring them back ("Nothing to compact yet" answers a click, and stayed in
# the transcript for good). Their seq is skipped in the log: a catch-up reads after a seq.
TRANSIENT_NOTICES = frozenset({"nothing_to_compact"})


def _stored(batch: list[Event]) -> list[Event]:
    return [e for e in batch if not (isinstance(e, ErrorEvent) and e.code in TRANSIENT_NOTICES)]


class Run:
    def __init__(self, setup: Setup, content: str | None, workspace: Workspace, system: str,
                 again: bool = False, rewind_to: int | None = None):  # fmt: skip
        self.conversation = setup.conversation
        self.config = setup.config
        self.announce_title = setup.titled
        self.content = content
        self.again = again  # answer the history's last prompt again (a new branch's)
        self.branch = setup.conversation.active_branch  # its events are stored on it
        self.author = setup.author
        self.images = setup.images
        self.inbox = Inbox()
        self.first_seq = setup.conversation.last_seq + 1  # where the pages' rendering starts
        self.task: asyncio.Task | None = None
        self._saving: asyncio.Task | None = None  # partial text being stored
        # The owner's budget, checked before each model call of the run (the offline demo
        # model costs nothing).
        self.guard = None if self.config.offline else SpendGuard(self.conversation.owner_id)
        # A project conversation's worktree is checkpointed (agent/runs/checkpoints.py).
        self.checkpoints = (
            Checkpointer(self.conversation) if in_project(self.conversation) else None
        )
        self.rewind_to = rewind_to  # an edited or regenerated prompt's seq: its files back
        self.agent: Agent = agent_for(setup, workspace, system, self._put, self.guard,
                                      self.checkpoints)  # fmt: skip

    def _put(self, event: Event) -> None:
        """An event of the agent's into the inbox; what it cost is spent already, though
        stored only later: the guard counts it from now."""
        if self.guard is not None and isinstance(event, UsageEvent):
            self.guard.spent(event)
        if self._holds(event):
            # A CLI agent's last calls are still being checkpointed: its final status waits
            # for them (the turn ends, on the page and for a switch, once its files are
            # recorded), numbered again when it goes.
            self._held = event
            self.agent.next_seq = event.seq
            return
        self.inbox.put(event)
        if self.checkpoints is not None and isinstance(event, ToolResultEvent):
            if self.conversation.agent == "harness":
                for checkpoint in self.checkpoints.take():  # its call's, recorded already
                    self._put_own(checkpoint)
            else:
                self.checkpoints.later(self._put_own)

    def _holds(self, event: Event) -> bool:
        return (
            self.checkpoints is not None
            and bool(self.checkpoints.tasks)
            and isinstance(event, StatusEvent)
            and event.state in ("idle", "error")
            and self.agent.next_seq == event.seq + 1  # the last one numbered
        )

    def _release(self) -> None:
        """The final status held back (``_put``), after the checkpoints it waited for."""
        held, self._held = self._held, None
        if held is not None:
            self._put_own(held)

    def _put_own(self, event: Event) -> None:
        """An event of the run's own (not the agent's), numbered in the agent's sequence."""
        seq = self.agent.next_seq
        self.agent.next_seq = seq + 1
        self.inbox.put(event.with_seq(seq))

    async def _checkpoint_at_start(self) -> None:
        if self.checkpoints is not None and self.rewind_to is not None:
            # Edit or Regenerate: the files as they were when that prompt started.
            for event in await self.checkpoints.rewind(self.rewind_to):
                self._put_own(event)
        if self.checkpoints is not None:
            done = await self.checkpoints.record()
            if done is not None:
                self._put_own(CheckpointEvent(id=done["id"], files=list(done["files"])))

    # Set by the writer when the run's events cannot be stored: the page's message (and
    # its code); the run is then stopped and its end shown, not stored.
    _storage_failure: tuple[str, str] | None = None
    _store_failures = 0  # consecutive failed stores
    _failure_shown = False  # the page got the storage error event
    failed = False  # ended in an error status (the metrics count it)
    # The agent has answered (its final status is out); the run records its last
    # checkpoints and saves: a branch switch or a restore waits for it (manager.settled).
    ending = False
    _held: Event | None = None  # a CLI agent's final status, until its last checkpoints

    async def main(self) -> None:
        writer = asyncio.create_task(self._write())
        lease = asyncio.create_task(self._keep_lease())
        try:
            if self.again:
                await self._checkpoint_at_start()
                await self.agent.answer_again()
            elif self.content is None:
                await self.agent.compact()
            else:
                await self._checkpoint_at_start()
                await self.agent.prompt(self.content, self.author, images=self.images)
            self.ending = True
            if self.checkpoints is not None:
                await self.checkpoints.settle()
            self._release()
        except Exception:  # the loop ends runs as events; this is a bug guard
            self.failed = True
            log.exception("run of %s crashed", self.conversation.id)
        finally:
            self._release()
            lease.cancel()
            self.inbox.close()
            with contextlib.suppress(Exception):
                await writer
            if self._storage_failure is None:
                await finish(self.conversation.id, self.agent.messages, self.agent.next_seq - 1)
            else:
                await self._finish_after_storage_failure()

    async def _finish_after_storage_failure(self) -> None:
        """Leave ``running`` although the status events were not stored: the final save
        sets the state, retried a few times (space may come back). If the database takes
        no write at all, the lease (no longer renewed) lapses and the reaper of any process
        marks the run interrupted once it does."""
        for delay in FINISH_RETRIES:
            await asyncio.sleep(delay)
            try:
                await finish(
                    self.conversation.id, self.agent.messages, self.agent.next_seq - 1,
                    Conversation.State.ERROR,
                )  # fmt: skip
                return
            except Exception as exc:  # noqa: BLE001 - retried, then left to the reaper
                log.warning("could not save the end of the run of %s: %s",
                            self.conversation.id, exc)  # fmt: skip
        log.error(
            "run of %s: the database takes no writes; the run is marked interrupted when its "
            "lease lapses and the database works again", self.conversation.id,
        )  # fmt: skip

    async def _keep_lease(self) -> None:
        while True:
            await asyncio.sleep(settings.HARNESS_RUN_LEASE / 3)
            try:
                ours = await renew_lease(self.conversation.id)
            except Exception:
                log.exception("could not renew the lease of %s", self.conversation.id)
                continue
            if not ours:
                log.warning("run of %s lost its lease; stopping it", self.conversation.id)
                self.agent.cancel()
                return

    async def _write(self) -> None:
        loop_lag.acquire()
        try:
            await self._write_batches()
        finally:
            loop_lag.release()

    async def _write_batches(self) -> None:
        # The last frame that carried text: only those pace the next (the first delta of an
        # answer never waits behind the status frame sent just before it).
        last_text = last_save = 0.0
        unsaved: list[Event] = []  # delta frames sent but not stored yet
        conversation = self.conversation
        phase = save_phase(conversation.id)
        done = False
        while not done:
            batch, done = await self.inbox.take()
            if not batch:
                continue
            if self._storage_failure is not None:
                # Nothing is stored any more; the stopping loop's last events still go to
                # the page (its "Cancelled" told as the storage error).
                await self._send_unstored(batch, conversation)
                continue
            only_deltas = _only_deltas(batch)
            if not done and only_deltas:
                # Only deltas: at once when the last text frame is older than the interval;
                # else wait it out and take what arrived meanwhile.
                wait = last_text + loop_lag.interval() - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                    more, done = self.inbox.take_nowait()
                    batch += more
                    only_deltas = _only_deltas(batch)
            try:
                if only_deltas and not done:
                    # Sent first, stored later (on its phase's next tick, off the hot path).
                    unsaved += batch
                    await self._send(batch, conversation)
                    if partial_save_due(last_save, time.monotonic(), phase):
                        await self._stored_partial()
                        self._saving = asyncio.create_task(eventlog.store(self.conversation.id,
                                                                          unsaved, None,
                                                                          self.branch))  # fmt: skip
                        unsaved, last_save = [], time.monotonic()
                else:
                    # Stored before it is sent: a page never shows what a reload would lose.
                    self._count_errors(batch)  # never a batch of deltas alone: off the hot path
                    history = None
                    if any(isinstance(e, HISTORY_CHANGES) for e in batch):
                        history = self.agent.messages
                    await self._stored_partial()
                    stored = unsaved + _stored(batch)
                    fresh = await self._store(stored, history) if stored else None
                    conversation = fresh or conversation
                    unsaved, last_save = [], time.monotonic()
                    await self._send(batch, conversation)
            except Exception:
                log.exception("could not deliver events of %s", self.conversation.id)
            # From the end of this frame: when the process is busy and frames take long,
            # they space out by themselves (fewer, bigger frames: less work per delta).
            if any(isinstance(event, TextDeltaEvent) for event in batch):
                last_text = time.monotonic()
        await self._stored_partial()  # before the run's final save, never after it
        if self._storage_failure is not None:
            await self._show_storage_failure(conversation)

    def _count_errors(self, batch: list[Event]) -> None:
        for event in batch:
            if isinstance(event, ErrorEvent):
                metrics.RUN_ERRORS.inc(label=event.code)
            elif isinstance(event, StatusEvent) and event.state == "error":
                self.failed = True

    async def _store(self, events: list[Event], history: list | None) -> Conversation | None:
        """Store a batch. A failure that ends the run (``_note_store_failure``) returns
        None: the batch is still sent, so the page sees what happened up to the end."""
        if self._storage_failure is not None:
            return None
        storing = self.guard.storing(events) if self.guard else contextlib.nullcontext()
        try:
            async with storing:
                fresh = await eventlog.store(self.conversation.id, events, history, self.branch)
        except Exception as exc:
            if not self._note_store_failure(exc):
                raise
            return None
        self._store_failures = 0
        return fresh

    def _note_store_failure(self, exc: BaseException) -> bool:
        """Count a failed store; a full disk, or failures that persist, end the run (the
        loop is cancelled; ``_send_unstored`` and ``_show_storage_failure`` tell the page
        why). True when the run is ending for this reason."""
        self._store_failures += 1
        if self._storage_failure is not None:
            return True
        if eventlog.storage_full(exc):
            self._storage_failure = (STORAGE_FULL_MESSAGE, "storage_full")
        elif self._store_failures >= STORE_ATTEMPTS:
            self._storage_failure = (STORAGE_ERROR_MESSAGE, "storage_error")
        else:
            return False
        self.failed = True
        log.error("run of %s stopped: its events cannot be stored (%s: %s)",
                  self.conversation.id, type(exc).__name__, exc)  # fmt: skip
        self.agent.cancel()
        return True

    async def _send_unstored(self, batch: list[Event], conversation) -> None:
        """Send events that cannot be stored, the loop's cancellation becoming the storage
        error (the same seqs: the page's sequence stays whole)."""
        message, code = self._storage_failure
        shown = []
        for event in batch:
            if isinstance(event, ErrorEvent) and event.code == "cancelled":
                event = dataclasses.replace(event, message=message, code=code)
                self._failure_shown = True
            elif isinstance(event, StatusEvent) and event.state == "error":
                event = dataclasses.replace(event, message="Not saved: the server's storage failed")
            shown.append(event)
        try:
            await self._send(shown, conversation)
        except Exception:
            log.exception("could not deliver events of %s", self.conversation.id)

    async def _show_storage_failure(self, conversation) -> None:
        """The loop had finished when storing failed (its last batch was not stored): the
        page still gets the error and an error status, and the log gets them if the
        database takes them now."""
        if self._failure_shown:
            return
        message, code = self._storage_failure
        seq = self.agent.next_seq
        self.agent.next_seq += 2  # the final save's last_seq covers them
        closing: list[Event] = [
            ErrorEvent(seq=seq, message=message, code=code),
            StatusEvent(seq=seq + 1, state="error", message="Not saved"),
        ]
        self._failure_shown = True
        try:
            await self._send(closing, conversation)
        except Exception:
            log.exception("could not deliver events of %s", self.conversation.id)
        with contextlib.suppress(Exception):
            await eventlog.store(self.conversation.id, closing, None, self.branch)

    async def _stored_partial(self) -> None:
        """Wait for the partial text being stored: batches reach the log in order."""
        if self._saving is not None:
            saving, self._saving = self._saving, None
            try:
                await saving
            except Exception as exc:  # lost partial text; the complete text will be stored
                log.exception("could not store partial text of %s", self.conversation.id)
                self._note_store_failure(exc)  # unless the disk is full: that ends the run

    async def _send(self, batch: list[Event], conversation: Conversation) -> None:
        title, self.announce_title = self.announce_title, False
        await broadcast(self.conversation.id, batch, self.branch, run=self.first_seq,
                        conversation=conversation, title=title)  # fmt: skip
