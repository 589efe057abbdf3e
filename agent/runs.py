"""Prompt runs in the server process: one asyncio task per running conversation.

A run belongs to the process, not to a browser connection: sockets come and go, the run
goes on. Its events are persisted to the event log (batched) and then broadcast, rendered,
to the conversation's channel-layer group. The database state ``running`` is the lock that
allows one prompt per conversation, across processes too.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import socket
import time
import uuid
import weakref
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from . import eventlog
from .client import make_client
from .config import Config
from .conversations import title_from_prompt
from .events import ErrorEvent, StatusEvent, now_ms
from .events import Event as CoreEvent
from .fragments import FragmentRenderer, sync_marker, title_fragments
from .harness import Harness
from .models import Conversation, Event, User
from .recovery import expired, interrupt
from .render_pool import prerender
from .runtime import agent_config
from .sandbox import sandbox_limits
from .storage import StorageError
from .system_prompt import build_system_prompt
from .tools import Workspace, build_tools
from .workspaces import workspace_for

log = logging.getLogger(__name__)

PROCESS_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
FRAME_INTERVAL = 0.05  # at most one frame of text deltas per 50 ms per conversation
# Frames of text deltas alone are broadcast at once and stored at most this often, in the
# background (everything else is stored before it is sent): a crash loses under a second
# of partial text, and a stream costs one write a second instead of twenty.
PARTIAL_SAVE_INTERVAL = 1.0


def group_name(conversation_id) -> str:
    return f"conv.{getattr(conversation_id, 'hex', conversation_id)}"


async def broadcast(conversation_id, events: list[dict[str, Any]], html: str) -> None:
    """Send a persisted batch to every socket and stream on the conversation, with its seq
    range (pages apply it only where it continues what they have)."""
    first, last = events[0]["seq"], events[-1]["seq"]
    await get_channel_layer().group_send(group_name(conversation_id), {
        "type": "conversation.batch",
        "seq_from": first,
        "seq_to": last,
        "html": sync_marker(first, last) + html,
        "events": events,
    })  # fmt: skip


async def announce_interrupted(done: list[tuple[Conversation, list[dict[str, Any]]]]) -> None:
    for conversation, events in done:
        renderer = FragmentRenderer()
        renderer.live = True  # pages may hold the dead run's live block: replace it
        await broadcast(conversation.id, events, renderer.render(events, conversation))


def interrupt_and_announce(queryset) -> None:
    """For synchronous callers (views): interrupt dead runs and tell open pages."""
    done = interrupt(queryset)
    if done:
        try:
            async_to_sync(announce_interrupted)(done)
        except Exception:
            log.exception("could not announce interrupted runs")


STORAGE_REFUSED = (
    "The server cannot store this prompt or prepare your workspace right now (its disk is "
    "full or failing). Nothing was run; try again later."
)


class RunRefused(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


# One SDK client per event loop: it holds an HTTP connection pool bound to that loop.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict] = weakref.WeakKeyDictionary()


def client_for(config: Config) -> Any:
    loop = asyncio.get_running_loop()
    per_loop = _clients.setdefault(loop, {})
    key = (config.api_key, config.base_url)
    if key not in per_loop:
        per_loop[key] = make_client(config)
    return per_loop[key]


@dataclass
class _Setup:
    conversation: Conversation
    config: Config
    titled: bool = False  # the prompt just gave the conversation its title
    bash_mode: str = "off"


def _lease_deadline():
    return timezone.now() + timedelta(seconds=settings.HARNESS_RUN_LEASE)


# Database calls of runs and sockets are not thread-sensitive: they go to a pool of
# threads, each with its own connection, instead of queueing on the one thread that every
# request shares (under load a socket's connect would outwait Daphne's accept timeout).
@partial(database_sync_to_async, thread_sensitive=False)
def _renew_lease(conversation_id) -> bool:
    """Extend this process's lease; False when the run is no longer ours (it was presumed
    dead and interrupted), in which case it must stop."""
    return bool(
        Conversation.objects.filter(
            id=conversation_id, lease_owner=PROCESS_ID, state=Conversation.State.RUNNING
        ).update(lease_until=_lease_deadline())
    )


def _check_quotas(owner_id: int) -> None:
    running = Conversation.objects.filter(owner_id=owner_id, state=Conversation.State.RUNNING)
    if running.count() >= settings.HARNESS_CONCURRENT_RUNS:
        raise RunRefused(
            "quota_concurrent",
            f"You already have {settings.HARNESS_CONCURRENT_RUNS} prompts running; wait for "
            "one to finish or cancel it.",
        )
    minute_ago = now_ms() - 60_000
    recent = Event.objects.filter(
        conversation__owner_id=owner_id, type="user", payload__timestamp__gte=minute_ago
    ).count()
    if recent >= settings.HARNESS_RUNS_PER_MINUTE:
        raise RunRefused(
            "quota_rate",
            f"You have sent {recent} prompts in the last minute (the limit is "
            f"{settings.HARNESS_RUNS_PER_MINUTE}); wait a moment and send it again.",
        )


@partial(database_sync_to_async, thread_sensitive=False)
def _claim(conversation_id, owner_id, prompt: str, remember: bool = False) -> _Setup:
    """Mark the conversation running, or refuse when a prompt already runs; a prompt typed
    in the page also joins the user's prompt history. One transaction, few queries: a
    prompt's start is the largest fixed cost of a run (the benchmark's profile)."""
    with transaction.atomic():
        conversation = (
            Conversation.objects.select_related("owner")
            .filter(id=conversation_id, owner_id=owner_id)
            .first()
        )
        if conversation is None:
            raise RunRefused("not_found", "Conversation not found.")
        owner = conversation.owner
        if not owner.is_active:
            raise RunRefused("forbidden", "This account cannot run prompts.")
        _check_quotas(owner_id)
        changes = {
            "state": Conversation.State.RUNNING,
            "lease_owner": PROCESS_ID,
            "lease_until": _lease_deadline(),
        }
        titled = not conversation.title
        if titled:
            changes["title"] = title_from_prompt(prompt)
        claimed = (
            Conversation.objects.filter(id=conversation_id)
            .exclude(state=Conversation.State.RUNNING)
            .update(**changes)
        )
        if not claimed:  # running, here or in another process
            raise RunRefused("prompt_running", "A prompt is already running; wait or cancel it.")
        for name, value in changes.items():
            setattr(conversation, name, value)
        if remember:
            owner.remember_prompt(prompt)
            User.objects.filter(id=owner_id).update(prompt_history=owner.prompt_history)
    bash_mode = settings.HARNESS_BASH if owner.bash_enabled else "off"
    return _Setup(conversation, agent_config(model=conversation.model), titled, bash_mode)


@partial(database_sync_to_async, thread_sensitive=False)
def _release(conversation_id) -> None:
    Conversation.objects.filter(id=conversation_id).update(
        state=Conversation.State.IDLE, lease_owner="", lease_until=None
    )


@partial(database_sync_to_async, thread_sensitive=False)
def _finish(
    conversation_id, messages: list[dict[str, Any]], last_seq: int, state: str | None = None
) -> None:
    """The run's final save; ``state``: set it here too (its status event was not stored)."""
    changes: dict[str, Any] = {"state": state} if state is not None else {}
    Conversation.objects.filter(id=conversation_id, lease_owner=PROCESS_ID).update(
        history=messages, last_seq=last_seq, lease_owner="", lease_until=None, **changes
    )


# A run whose events cannot be stored is ended (agent/eventlog.py storage_full): its
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


class _Inbox:
    """The run's events on their way to the writer. Putting one is a list append; the
    writer is woken only when it waits (not once per delta while it waits out a frame)."""

    def __init__(self) -> None:
        self._events: list[CoreEvent] = []
        self._closed = False
        self._ready = asyncio.Event()

    def put(self, event: CoreEvent) -> None:
        self._events.append(event)
        self._ready.set()

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    def take_nowait(self) -> tuple[list[CoreEvent], bool]:
        """Everything pending, and whether the run has ended (nothing more will come)."""
        events, self._events = self._events, []
        self._ready.clear()
        return events, self._closed

    async def take(self) -> tuple[list[CoreEvent], bool]:
        await self._ready.wait()
        return self.take_nowait()


def _prepare(owner_id: int, identity: str | None) -> tuple[Workspace, str]:
    """The owner's workspace (made, and on a quota deployment mounted, on first use) and
    the system prompt with its AGENTS.md. Blocking file system work: run it in a thread."""
    workspace = workspace_for(owner_id)
    return workspace, build_system_prompt(workspace, identity)


class Run:
    def __init__(self, setup: _Setup, content: str, workspace: Workspace, system: str):
        self.conversation = setup.conversation
        self.config = setup.config
        self.announce_title = setup.titled
        self.content = content
        self.inbox = _Inbox()
        self.renderer = FragmentRenderer()
        self.group = group_name(self.conversation.id)
        self.layer = get_channel_layer()
        self.harness = Harness(
            client_for(self.config),
            build_tools(workspace, setup.bash_mode, sandbox_limits=sandbox_limits()),
            self.config,
            self.inbox.put,
            system=system,
            messages=self.conversation.history,
            next_seq=self.conversation.last_seq + 1,
        )
        self.task: asyncio.Task | None = None
        self._saving: asyncio.Task | None = None  # partial text being stored

    # Set by the writer when the run's events cannot be stored: the page's message (and
    # its code); the run is then stopped and its end shown, not stored.
    _storage_failure: tuple[str, str] | None = None
    _store_failures = 0  # consecutive failed stores
    _failure_shown = False  # the page got the storage error event

    async def main(self) -> None:
        writer = asyncio.create_task(self._write())
        lease = asyncio.create_task(self._keep_lease())
        try:
            await self.harness.prompt(self.content)
        except Exception:  # the harness ends runs as events; this is a bug guard
            log.exception("run of %s crashed", self.conversation.id)
        finally:
            lease.cancel()
            self.inbox.close()
            with contextlib.suppress(Exception):
                await writer
            if self._storage_failure is None:
                await _finish(
                    self.conversation.id, self.harness.messages, self.harness.next_seq - 1
                )
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
                await _finish(
                    self.conversation.id, self.harness.messages, self.harness.next_seq - 1,
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
                ours = await _renew_lease(self.conversation.id)
            except Exception:
                log.exception("could not renew the lease of %s", self.conversation.id)
                continue
            if not ours:
                log.warning("run of %s lost its lease; stopping it", self.conversation.id)
                self.harness.cancel()
                return

    async def _write(self) -> None:
        last_frame = last_save = 0.0
        unsaved: list[dict[str, Any]] = []  # delta frames sent but not stored yet
        conversation = self.conversation
        done = False
        while not done:
            events, done = await self.inbox.take()
            batch = [event.to_dict() for event in events]
            if not batch:
                continue
            if self._storage_failure is not None:
                # Nothing is stored any more; the stopping harness's last events still go
                # to the page (its "Cancelled" told as the storage error).
                await self._send_unstored(batch, conversation)
                continue
            only_deltas = all(e["type"] == "text_delta" for e in batch)
            if not done and only_deltas:
                # Only deltas: wait out the frame interval and take what arrived meanwhile.
                wait = last_frame + FRAME_INTERVAL - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                    more, done = self.inbox.take_nowait()
                    batch += [event.to_dict() for event in more]
                    only_deltas = all(e["type"] == "text_delta" for e in batch)
            try:
                if only_deltas and not done:
                    # Sent first, stored later (at most once a second, off the hot path).
                    unsaved += batch
                    await self._send(batch, conversation)
                    if time.monotonic() - last_save >= PARTIAL_SAVE_INTERVAL:
                        await self._stored_partial()
                        self._saving = asyncio.create_task(eventlog.store(self.conversation.id,
                                                                          unsaved))  # fmt: skip
                        unsaved, last_save = [], time.monotonic()
                else:
                    # Stored before it is sent: a page never shows what a reload would lose.
                    snapshot = None
                    if any(e["type"] in ("status", "text", "tool_result") for e in batch):
                        snapshot = self.harness.messages
                    await self._stored_partial()
                    fresh = await self._store(unsaved + batch, snapshot)
                    conversation = fresh or conversation
                    unsaved, last_save = [], time.monotonic()
                    await self._send(batch, conversation)
            except Exception:
                log.exception("could not deliver events of %s", self.conversation.id)
            # From the end of this frame: when the process is busy and frames take long,
            # they space out by themselves (fewer, bigger frames: less work per delta).
            last_frame = time.monotonic()
        await self._stored_partial()  # before the run's final save, never after it
        if self._storage_failure is not None:
            await self._show_storage_failure(conversation)

    async def _store(
        self, events: list[dict[str, Any]], snapshot: list[dict[str, Any]] | None
    ) -> Conversation | None:
        """Store a batch. A failure that ends the run (``_note_store_failure``) returns
        None: the batch is still sent, so the page sees what happened up to the end."""
        if self._storage_failure is not None:
            return None
        try:
            fresh = await eventlog.store(self.conversation.id, events, snapshot)
        except Exception as exc:
            if not self._note_store_failure(exc):
                raise
            return None
        self._store_failures = 0
        return fresh

    def _note_store_failure(self, exc: BaseException) -> bool:
        """Count a failed store; a full disk, or failures that persist, end the run (the
        harness is cancelled; ``_send_unstored`` and ``_show_storage_failure`` tell the
        page why). True when the run is ending for this reason."""
        self._store_failures += 1
        if self._storage_failure is not None:
            return True
        if eventlog.storage_full(exc):
            self._storage_failure = (STORAGE_FULL_MESSAGE, "storage_full")
        elif self._store_failures >= STORE_ATTEMPTS:
            self._storage_failure = (STORAGE_ERROR_MESSAGE, "storage_error")
        else:
            return False
        log.error("run of %s stopped: its events cannot be stored (%s: %s)",
                  self.conversation.id, type(exc).__name__, exc)  # fmt: skip
        self.harness.cancel()
        return True

    async def _send_unstored(self, batch: list[dict[str, Any]], conversation) -> None:
        """Send events that cannot be stored, the harness's cancellation becoming the
        storage error (the same seqs: the page's sequence stays whole)."""
        message, code = self._storage_failure
        shown = []
        for event in batch:
            if event["type"] == "error" and event["code"] == "cancelled":
                event = {**event, "message": message, "code": code}
                self._failure_shown = True
            elif event["type"] == "status" and event["state"] == "error":
                event = {**event, "message": "Not saved: the server's storage failed"}
            shown.append(event)
        try:
            await self._send(shown, conversation)
        except Exception:
            log.exception("could not deliver events of %s", self.conversation.id)

    async def _show_storage_failure(self, conversation) -> None:
        """The harness had finished when storing failed (its last batch was not stored):
        the page still gets the error and an error status, and the log gets them if the
        database takes them now."""
        if self._failure_shown:
            return
        message, code = self._storage_failure
        seq = self.harness.next_seq
        self.harness.next_seq += 2  # the final save's last_seq covers them
        closing = [
            ErrorEvent(seq=seq, message=message, code=code).to_dict(),
            StatusEvent(seq=seq + 1, state="error", message="Not saved").to_dict(),
        ]
        self._failure_shown = True
        try:
            await self._send(closing, conversation)
        except Exception:
            log.exception("could not deliver events of %s", self.conversation.id)
        with contextlib.suppress(Exception):
            await eventlog.store(self.conversation.id, closing)

    async def _stored_partial(self) -> None:
        """Wait for the partial text being stored: batches reach the log in order."""
        if self._saving is not None:
            saving, self._saving = self._saving, None
            try:
                await saving
            except Exception as exc:  # lost partial text; the complete text will be stored
                log.exception("could not store partial text of %s", self.conversation.id)
                self._note_store_failure(exc)  # unless the disk is full: that ends the run

    async def _send(self, batch: list[dict[str, Any]], conversation: Conversation) -> None:
        await prerender([e["content"] for e in batch if e["type"] == "text"])
        html = self.renderer.render(batch, conversation)
        if self.announce_title:
            html = title_fragments(conversation) + html
            self.announce_title = False
        await broadcast(self.conversation.id, batch, html)


def control_group(conversation_id) -> str:
    return f"runs.{getattr(conversation_id, 'hex', str(conversation_id).replace('-', ''))}"


class RunManager:
    """The runs of this process. Each process listens on a channel of its own and joins a
    control group per running conversation, so a cancel sent from any process (another
    server, the API, an admin action) reaches the run wherever it is."""

    def __init__(self) -> None:
        self._runs: dict[str, Run] = {}
        self._channel: str | None = None
        self._listener: asyncio.Task | None = None
        self._reaper: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _ensure_listener(self) -> str:
        loop = asyncio.get_running_loop()
        if self._channel is None or self._loop is not loop or self._listener.done():
            layer = get_channel_layer()
            # The default prefix, always: channels_redis pops one key per prefix under one
            # lock per process, so a channel with another prefix starves every socket.
            self._channel = await layer.new_channel()
            self._loop = loop
            fresh = contextvars.Context  # not the request's context (see start())
            self._listener = loop.create_task(self._listen(layer, self._channel), context=fresh())
            self._reaper = loop.create_task(self._reap(), context=fresh())
        return self._channel

    async def _reap(self) -> None:
        """Interrupt runs (of any process) whose lease lapsed: their process is gone."""
        while True:
            try:
                done = await database_sync_to_async(
                    lambda: interrupt(expired()), thread_sensitive=False
                )()
                await announce_interrupted(done)
            except Exception:
                log.exception("reaping expired runs failed")
            await asyncio.sleep(max(1.0, settings.HARNESS_RUN_LEASE / 3))

    async def start_background(self) -> None:
        """Start this process's control listener and reaper (idempotent, per event loop)."""
        await self._ensure_listener()

    async def _listen(self, layer, channel: str) -> None:
        while True:
            try:
                message = await layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # a broken layer connection: retry shortly
                log.exception("run control channel failed")
                await asyncio.sleep(1)
                continue
            if message.get("type") == "run.cancel":
                self.cancel_local(message.get("conversation"))

    async def start(
        self, conversation_id, owner_id: int, content: str, *, remember: bool = False
    ) -> Run:
        """Start a prompt; ``remember`` also saves it in the user's prompt history (the
        page's prompts; not the API's)."""
        existing = self._runs.get(str(conversation_id))
        if existing is not None:
            if existing.harness.running:
                raise RunRefused(
                    "prompt_running", "A prompt is already running; wait or cancel it."
                )
            # Its final status is out, it is only saving: a prompt sent right away waits.
            await asyncio.shield(existing.task)
        channel = await self._ensure_listener()
        try:
            setup = await _claim(conversation_id, owner_id, content, remember)
        except Exception as exc:
            if eventlog.storage_full(exc):
                raise RunRefused("storage_full", STORAGE_REFUSED) from exc
            raise
        try:
            workspace, system = await asyncio.to_thread(
                _prepare, owner_id, setup.config.system_prompt
            )
            run = Run(setup, content, workspace, system)
        except Exception as exc:
            with contextlib.suppress(Exception):
                await _release(conversation_id)
            if isinstance(exc, StorageError) or eventlog.storage_full(exc):
                raise RunRefused("storage_full", STORAGE_REFUSED) from exc
            raise
        key = str(conversation_id)
        self._runs[key] = run
        layer = get_channel_layer()
        await layer.group_add(control_group(conversation_id), channel)

        async def main() -> None:
            try:
                await run.main()
            finally:
                self._runs.pop(key, None)
                with contextlib.suppress(Exception):
                    await layer.group_discard(control_group(conversation_id), channel)

        # A fresh context: the run must not inherit the request's (asgiref binds thread-
        # sensitive database calls to an executor that dies with the request or socket).
        run.task = asyncio.create_task(main(), name=f"run-{key}", context=contextvars.Context())
        return run

    def cancel_local(self, conversation_id) -> bool:
        run = self._runs.get(str(conversation_id))
        return run.harness.cancel() if run is not None else False

    async def cancel(self, conversation_id) -> bool:
        """Cancel the conversation's run in whichever process runs it. True when this
        process had it; a run elsewhere is told through the channel layer."""
        if self.cancel_local(conversation_id):
            return True
        await get_channel_layer().group_send(
            control_group(conversation_id),
            {"type": "run.cancel", "conversation": str(conversation_id)},
        )
        return False

    async def wait(self, conversation_id) -> None:
        run = self._runs.get(str(conversation_id))
        if run is not None and run.task is not None:
            await asyncio.shield(run.task)


runs = RunManager()


def cancel_from_sync(conversation_id) -> None:
    """Cancel a run from synchronous code (a view, a signal): through the channel layer,
    which reaches the run's event loop safely, in this process or another."""
    async_to_sync(get_channel_layer().group_send)(
        control_group(conversation_id),
        {"type": "run.cancel", "conversation": str(conversation_id)},
    )
