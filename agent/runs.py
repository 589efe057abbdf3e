"""Prompt runs in the server process: one asyncio task per running conversation.

A run belongs to the process, not to a browser connection: sockets come and go, the run
goes on. Its events are persisted to the event log (batched) and then broadcast, rendered,
to the conversation's channel-layer group. The database state ``running`` is the lock that
allows one prompt per conversation, across processes too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction
from django.db.models import F

from .client import make_client
from .config import Config
from .conversations import title_from_prompt
from .events import Event as CoreEvent
from .fragments import FragmentRenderer, title_fragments
from .harness import Harness
from .models import Conversation, Event
from .runtime import agent_config
from .system_prompt import build_system_prompt
from .tools import build_tools
from .workspaces import workspace_for

log = logging.getLogger(__name__)

FRAME_INTERVAL = 0.05  # at most one frame of text deltas per 50 ms per conversation
STATE_FOR_STATUS = {"thinking": "running", "running_tool": "running", "idle": "idle",
                    "error": "error"}  # fmt: skip


def group_name(conversation_id) -> str:
    return f"conv.{getattr(conversation_id, 'hex', conversation_id)}"


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


@database_sync_to_async
def _claim(conversation_id, owner_id, prompt: str) -> _Setup:
    """Mark the conversation running, or refuse when a prompt already runs."""
    with transaction.atomic():
        claimed = (
            Conversation.objects.filter(id=conversation_id, owner_id=owner_id)
            .exclude(state=Conversation.State.RUNNING)
            .update(state=Conversation.State.RUNNING)
        )
        conversation = Conversation.objects.filter(id=conversation_id, owner_id=owner_id).first()
        if conversation is None:
            raise RunRefused("not_found", "Conversation not found.")
        if not claimed:
            raise RunRefused("prompt_running", "A prompt is already running; wait or cancel it.")
        titled = not conversation.title
        if titled:
            conversation.title = title_from_prompt(prompt)
            conversation.save(update_fields=["title"])
    return _Setup(conversation, agent_config(model=conversation.model), titled)


@database_sync_to_async
def _persist(conversation_id, events: list[dict[str, Any]]) -> Conversation:
    """Store a batch of events and fold them into the conversation's row; one transaction."""
    stored = [e for e in events if e["type"] != "text_delta"]
    changes: dict[str, Any] = {"last_seq": max(e["seq"] for e in events)}
    for event in stored:
        if event["type"] == "status":
            changes["state"] = STATE_FOR_STATUS[event["state"]]
        elif event["type"] == "usage":
            for name in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                         "cache_creation_input_tokens"):  # fmt: skip
                changes[name] = F(name) + event[name]
            changes["cost_usd"] = F("cost_usd") + Decimal(str(event["cost_usd"]))
    with transaction.atomic():
        if stored:
            Event.objects.bulk_create(
                Event(conversation_id=conversation_id, seq=e["seq"], type=e["type"], payload=e)
                for e in stored
            )
        Conversation.objects.filter(id=conversation_id).update(**changes)
    return Conversation.objects.get(id=conversation_id)


@database_sync_to_async
def _release(conversation_id) -> None:
    Conversation.objects.filter(id=conversation_id).update(state=Conversation.State.IDLE)


@database_sync_to_async
def _finish(conversation_id, messages: list[dict[str, Any]], last_seq: int) -> None:
    Conversation.objects.filter(id=conversation_id).update(history=messages, last_seq=last_seq)


class Run:
    def __init__(self, setup: _Setup, content: str):
        self.conversation = setup.conversation
        self.config = setup.config
        self.announce_title = setup.titled
        self.content = content
        self.queue: asyncio.Queue[CoreEvent | None] = asyncio.Queue()
        self.renderer = FragmentRenderer()
        self.group = group_name(self.conversation.id)
        self.layer = get_channel_layer()
        workspace = workspace_for(self.conversation.owner_id)
        self.harness = Harness(
            client_for(self.config),
            build_tools(workspace, settings.HARNESS_BASH),
            self.config,
            self.queue.put_nowait,
            system=build_system_prompt(workspace.root, self.config.system_prompt),
            messages=self.conversation.history,
            next_seq=self.conversation.last_seq + 1,
        )
        self.task: asyncio.Task | None = None

    async def main(self) -> None:
        writer = asyncio.create_task(self._write())
        try:
            await self.harness.prompt(self.content)
        except Exception:  # the harness ends runs as events; this is a bug guard
            log.exception("run of %s crashed", self.conversation.id)
        finally:
            self.queue.put_nowait(None)
            with contextlib.suppress(Exception):
                await writer
            await _finish(self.conversation.id, self.harness.messages, self.harness.next_seq - 1)

    async def _write(self) -> None:
        last_frame = 0.0
        done = False
        while not done:
            batch: list[dict[str, Any]] = []
            item = await self.queue.get()
            while True:
                if item is None:
                    done = True
                    break
                batch.append(item.to_dict())
                try:
                    item = self.queue.get_nowait()
                except asyncio.QueueEmpty:
                    break
            if not batch:
                continue
            if not done and all(e["type"] == "text_delta" for e in batch):
                # Only deltas: wait out the frame interval and take what arrived meanwhile.
                wait = last_frame + FRAME_INTERVAL - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                    while not self.queue.empty():
                        more = self.queue.get_nowait()
                        if more is None:
                            done = True
                            break
                        batch.append(more.to_dict())
            try:
                conversation = await _persist(self.conversation.id, batch)
                html = self.renderer.render(batch, conversation)
                if self.announce_title:
                    html = title_fragments(conversation) + html
                    self.announce_title = False
                await self.layer.group_send(self.group, {"type": "conversation.html", "html": html})
            except Exception:
                log.exception("could not deliver events of %s", self.conversation.id)
            last_frame = time.monotonic()


class RunManager:
    def __init__(self) -> None:
        self._runs: dict[str, Run] = {}

    def get(self, conversation_id) -> Run | None:
        return self._runs.get(str(conversation_id))

    async def start(self, conversation_id, owner_id: int, content: str) -> Run:
        if str(conversation_id) in self._runs:
            raise RunRefused("prompt_running", "A prompt is already running; wait or cancel it.")
        setup = await _claim(conversation_id, owner_id, content)
        try:
            run = Run(setup, content)
        except Exception:
            await _release(conversation_id)
            raise
        key = str(conversation_id)
        self._runs[key] = run

        async def main() -> None:
            try:
                await run.main()
            finally:
                self._runs.pop(key, None)

        run.task = asyncio.create_task(main(), name=f"run-{key}")
        return run

    def cancel(self, conversation_id) -> bool:
        run = self._runs.get(str(conversation_id))
        return run.harness.cancel() if run is not None else False

    async def wait(self, conversation_id) -> None:
        run = self._runs.get(str(conversation_id))
        if run is not None and run.task is not None:
            await asyncio.shield(run.task)


runs = RunManager()
