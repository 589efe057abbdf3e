"""The runs' control channel between server processes. Each process listens on a channel of
its own and joins a control group per conversation it runs: a cancel, a queue request, an
unqueue, an approval's decision or a member's removal sent to that group reaches the run
wherever it is; requests are answered on the asker's own channel. And the reaper, which
interrupts the runs (of any process) whose lease lapsed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from agent.core.images import ImageRef
from agent.runs.broadcast import announce_interrupted
from agent.runs.claim import RunRefused, renew_leases
from agent.runs.groups import control_group
from agent.runs.recovery import expired, interrupt

if TYPE_CHECKING:
    from agent.runs.manager import RunManager

log = logging.getLogger(__name__)

# How long a process waits for the one running a conversation to answer a queue request
# (seconds); no answer: no process runs it any more.
REPLY_TIMEOUT = 5.0


def cancel_message(conversation_id) -> dict:
    return {"type": "run.cancel", "conversation": str(conversation_id)}


async def listen(manager: RunManager, layer, channel: str) -> None:
    while True:
        try:
            message = await layer.receive(channel)
        except asyncio.CancelledError:
            raise
        except Exception:  # a broken layer connection: retry shortly
            log.exception("run control channel failed")
            await asyncio.sleep(1)
            continue
        kind = message.get("type")
        if kind == "run.cancel":
            manager.cancel_local(message.get("conversation"))
        elif kind == "run.drop_author" and isinstance(message.get("author"), str):
            manager.drop_author_local(message.get("conversation"), message["author"])
        elif kind in ("run.queue", "run.unqueue", "run.decide") and isinstance(
            message.get("reply"), str
        ):
            await answer(manager, layer, message)


async def answer(manager: RunManager, layer, message: dict) -> None:
    """A queue request from another process: done here if this process runs the
    conversation (only then is it in the control group), answered on its channel."""
    conversation = message.get("conversation")
    try:
        if message["type"] == "run.unqueue":
            reply = {"removed": manager.unqueue_local(conversation, str(message.get("id")))}
        elif message["type"] == "run.decide":
            reason = message.get("reason")
            outcome = manager.decide_local(
                conversation, str(message.get("id")), str(message.get("decision")),
                reason if isinstance(reason, str) else None, str(message.get("by", "")),
                approve_all=bool(message.get("approve_all")),
            )  # fmt: skip
            reply = {"outcome": outcome}
        else:
            author = message.get("author")
            refs = [ImageRef.from_dict(image) for image in message.get("images") or ()]
            queued = manager.queue_local(
                conversation, str(message.get("content")), str(message.get("mode")),
                str(message.get("id")), author if isinstance(author, str) else None, refs,
            )  # fmt: skip
            reply = {"queued": queued} if queued else {"refused": "not_running"}
    except RunRefused as refused:
        reply = {"refused": refused.code}
    try:
        await layer.send(message["reply"], {"type": "run.reply", **reply})
    except Exception:
        log.exception("could not answer a queue request for %s", conversation)


async def ask(conversation_id, message: dict) -> dict | None:
    """Send a request to the process running the conversation and wait for its answer
    (None: no answer in time, so none runs it)."""
    layer = get_channel_layer()
    reply = await layer.new_channel()
    await layer.group_send(control_group(conversation_id), {
        **message, "conversation": str(conversation_id), "reply": reply,
    })  # fmt: skip
    try:
        return await asyncio.wait_for(layer.receive(reply), REPLY_TIMEOUT)
    except TimeoutError:
        return None


async def reap(held: Callable[[], set[str]]) -> None:
    """Interrupt runs (of any process) whose lease lapsed: their process is gone. The runs
    this process ``held`` (running, or claimed and still preparing their workspace) get
    their leases renewed first and are never taken for dead: under load a claim's
    preparation can outlast a lease, and a pass of this process must not interrupt what it
    is about to run."""
    while True:
        try:
            done = await database_sync_to_async(_renew_and_reap, thread_sensitive=False)(held())
            await announce_interrupted(done)
        except Exception:
            log.exception("reaping expired runs failed")
        await asyncio.sleep(max(1.0, settings.HARNESS_RUN_LEASE / 3))


def _renew_and_reap(ours: set[str]):
    if ours:
        renew_leases(ours)
    return interrupt(expired().exclude(id__in=ours))


def drop_author_from_sync(conversation_id, author: str) -> None:
    """Drop what ``author`` queued on the conversation's run, wherever it runs (they lost
    access): through the channel layer, like a cancel."""
    async_to_sync(get_channel_layer().group_send)(control_group(conversation_id), {
        "type": "run.drop_author", "conversation": str(conversation_id), "author": author,
    })  # fmt: skip


def cancel_from_sync(conversation_id) -> None:
    """Cancel a run from synchronous code (a view, a signal): through the channel layer,
    which reaches the run's event loop safely, in this process or another."""
    async_to_sync(get_channel_layer().group_send)(
        control_group(conversation_id), cancel_message(conversation_id)
    )
