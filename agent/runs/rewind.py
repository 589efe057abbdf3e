"""A project conversation's checkpoints as the API and the branches see them, and rewinds
outside a run (docs/API.md, "Projects").

A checkpoint's record is its ``checkpoint`` event: the checkpoints of a branch are the
events on its path. A rewind outside a run (``POST …/restore``, activating a branch) holds
the conversation as a run would (``running``, leased to this process, so no prompt starts
meanwhile and a crash is reaped like a run's), restores in the owner's sandbox, stores and
broadcasts the checkpoints it made on the active branch, then lets go.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from functools import partial

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from agent.core.events import CheckpointEvent
from agent.core.projects.checkpoints import UnknownCheckpoint
from agent.models import Conversation, Event
from agent.runs import eventlog, projects
from agent.runs.branches import active_path
from agent.runs.broadcast import broadcast
from agent.runs.claim import PROCESS_ID, RunRefused

log = logging.getLogger(__name__)

BUSY = "A prompt is running: restore the files when it ends."


def _checkpoints(conversation: Conversation, **where):
    rows = Event.objects.filter(conversation=conversation, type=CheckpointEvent.type, **where)
    return rows.filter(active_path(conversation))


def listing(conversation: Conversation) -> list[dict]:
    """The active branch's checkpoints, oldest first."""
    rows = _checkpoints(conversation).order_by("seq").values_list("seq", "payload")[:10000]
    return [{"id": p.get("id"), "seq": seq, "files": p.get("files", [])} for seq, p in rows]


def before(conversation: Conversation, seq: int) -> str | None:
    """The checkpoint taken when the prompt at ``seq`` started: the last one before it."""
    found = _checkpoints(conversation, seq__lt=seq).order_by("-seq").values_list("payload")[:1]
    return found[0][0].get("id") if found else None


def newest(conversation: Conversation) -> str | None:
    found = _checkpoints(conversation).order_by("-seq").values_list("payload")[:1]
    return found[0][0].get("id") if found else None


def recorded(conversation: Conversation, target: str) -> bool:
    """Whether ``target`` is a checkpoint Harness recorded in this conversation (on any
    of its branches). The sandbox's own test (reachable from the conversation's checkpoint
    ref) is not enough: the agent moves that ref, and its repository may borrow objects
    (``objects/info/alternates``) from another project the owner's sandbox can see."""
    rows = Event.objects.filter(conversation=conversation, type=CheckpointEvent.type)
    return rows.filter(payload__id=target).exists()


def made(done: dict) -> list[CheckpointEvent]:
    """A restore's checkpoints (the state replaced, the state restored), unnumbered."""
    return [CheckpointEvent(id=c["id"], files=list(c["files"]))
            for c in (done.get("before"), done.get("after")) if c]  # fmt: skip


@partial(sync_to_async, thread_sensitive=False)
def _hold(conversation_id) -> Conversation | None:
    conversation = Conversation.objects.filter(id=conversation_id).first()
    if conversation is None or conversation.state == Conversation.State.RUNNING:
        return None
    until = timezone.now() + timedelta(seconds=settings.HARNESS_RUN_LEASE)
    held = Conversation.objects.filter(id=conversation_id, state=conversation.state).update(
        state=Conversation.State.RUNNING, lease_owner=PROCESS_ID, lease_until=until
    )
    return conversation if held else None


@partial(sync_to_async, thread_sensitive=False)
def _let_go(conversation_id, state: str) -> None:
    Conversation.objects.filter(id=conversation_id, lease_owner=PROCESS_ID).update(
        state=state, lease_owner="", lease_until=None
    )


async def restore(conversation_id, target: str | None = None) -> list[dict]:
    """Restore ``target`` (None: the active branch's newest checkpoint) while no prompt
    runs; the checkpoints made, as their events' JSON. ``RunRefused`` ``prompt_running``;
    the sandbox's ``GitError`` (``UnknownCheckpoint`` for an id this conversation never
    recorded)."""
    conversation = await _hold(conversation_id)
    if conversation is None:
        raise RunRefused("prompt_running", BUSY)
    try:
        if target is None:
            target = await sync_to_async(newest, thread_sensitive=False)(conversation)
            if target is None:
                return []
        elif not await sync_to_async(recorded, thread_sensitive=False)(conversation, target):
            raise UnknownCheckpoint("not a checkpoint of this conversation")
        done = await asyncio.to_thread(projects.restore, conversation, target)
        events = made(done)
        if not events:
            return []
        numbered = [e.with_seq(conversation.last_seq + i + 1) for i, e in enumerate(events)]
        branch = conversation.active_branch
        await eventlog.store(conversation.id, numbered, branch=branch)
        await broadcast(conversation.id, numbered, branch, run=numbered[0].seq)
        return eventlog.wire(numbered, branch)
    finally:
        await _let_go(conversation_id, conversation.state)


async def restore_branch(conversation_id) -> None:
    """After a switch of branches: a project conversation's files become the new branch's
    newest checkpoint. The switch is done whatever happens here (a failure is logged)."""
    conversation = await Conversation.objects.filter(id=conversation_id).afirst()
    if conversation is None or not projects.in_project(conversation):
        return
    try:
        await restore(conversation_id)
    except Exception as exc:  # noqa: BLE001 - the branch is switched; the files stay
        log.warning("restore after a branch switch of %s failed: %s", conversation_id, exc)
