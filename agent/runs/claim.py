"""Taking and giving back a conversation for one prompt: the claim (state ``running``, the
lock that allows one prompt per conversation across processes), the quotas checked under
it (``quotas``), the lease that tells other processes this one is alive, and the final save."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import socket
import uuid
from dataclasses import dataclass, field, replace
from datetime import timedelta
from functools import partial
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agent.access import DRIVE, allows, owned_by, readable_one, with_owners
from agent.core.config import Config
from agent.core.images import ImageRef
from agent.core.system_prompt import build_system_prompt
from agent.core.tools import Workspace
from agent.models import Conversation, DeploymentInstructions, Membership, User
from agent.runs import attachments
from agent.runs.config import agent_config
from agent.runs.quotas import RunRefused, check_budget, check_quotas, check_rate
from agent.runs.sandbox import bash_mode as sandbox_bash_mode
from agent.runs.signals import conversation_named
from agent.runs.workspaces import conversation_workspace, workspace_for
from agent.server import grouping

PROCESS_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
TITLE_LENGTH = 60

STORAGE_REFUSED = (
    "The server cannot store this prompt or prepare your workspace right now (its disk is "
    "full or failing). Nothing was run; try again later."
)


ALREADY_RUNNING = "A prompt is already running; wait or cancel it."


@dataclass
class Setup:
    conversation: Conversation
    config: Config
    titled: bool = False  # the prompt just gave the conversation its title
    bash_mode: str = "off"
    author: str | None = None  # the ``user`` event's author (a shared conversation)
    branched: bool = False  # it starts a new branch: pages are re-drawn
    fork_seq: int = 0  # … after this seq
    images: tuple[ImageRef, ...] = ()  # attached to the prompt
    # The owner's workspace and the system prompt, made once the claim is committed (each
    # claim's on its own, beside the others'); or why they could not be (the run is then
    # not started).
    workspace: Workspace | None = None
    system: str = ""
    unprepared: BaseException | None = None


def title_from_prompt(prompt: str) -> str:
    first = " ".join(prompt.strip().split())
    return first if len(first) <= TITLE_LENGTH else first[: TITLE_LENGTH - 1] + "…"


def _lease_deadline():
    return timezone.now() + timedelta(seconds=settings.HARNESS_RUN_LEASE)


# Database calls of runs and sockets are not thread-sensitive: they go to a pool of
# threads, each with its own connection, instead of queueing on the one thread that every
# request shares (under load a socket's connect would outwait Daphne's accept timeout).
@partial(database_sync_to_async, thread_sensitive=False)
def renew_lease(conversation_id) -> bool:
    """Extend this process's lease; False when the run is no longer ours (it was presumed
    dead and interrupted), in which case it must stop."""
    return bool(renew_leases([conversation_id]))


def renew_leases(conversation_ids) -> int:
    """Extend, in one UPDATE, the leases this process holds on the given conversations
    (the reaper's pass: runs still preparing, whose own renewal has not started yet)."""
    return Conversation.objects.filter(
        id__in=conversation_ids, lease_owner=PROCESS_ID, state=Conversation.State.RUNNING
    ).update(lease_until=_lease_deadline())


@dataclass
class _Read:
    """A group's conversations (with their owners) and which of them have members, read
    together: one query each for the group rather than per claim."""

    rows: dict[uuid.UUID, Conversation]
    shared: set[uuid.UUID]

    @classmethod
    def of(cls, requests: list[_Claim]) -> _Read:
        keys = {key for request in requests if (key := _key(request.conversation_id))}
        members = Membership.objects.filter(conversation_id__in=keys)
        return cls({row.id: row for row in with_owners(keys)},
                   set(members.values_list("conversation_id", flat=True).distinct()))  # fmt: skip

    def lock_order(self, request: _Claim) -> int:
        """Where the claim comes in the order every group takes its owners' rows (each
        claim holds its owner's row, then its conversation's): two groups at once
        (``CLAIM_WORKERS``) with claims of the same owners in other orders deadlocked, and
        PostgreSQL undid one. An owner's own claims keep the order they came in."""
        row = self.rows.get(_key(request.conversation_id))
        return 0 if row is None else row.owner_id

    def take(self, key) -> tuple[Conversation | None, bool | None]:
        """The row, once: a second claim of the group on the same conversation reads it
        again (the first may have changed it, or been undone)."""
        row = self.rows.pop(key, None)
        return row, (None if row is None else key in self.shared)


def _key(conversation_id) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(conversation_id))
    except ValueError:
        return None


def driven_by(
    conversation_id, user_id, read: _Read | None = None
) -> tuple[Conversation, str | None]:
    """The conversation ``user_id`` may drive (its owner loaded) and the author its prompt
    carries; or ``RunRefused``: ``not_found`` (cannot read it), ``forbidden`` (a viewer,
    or an inactive owner). The run works in the owner's workspace and spends the owner's
    budget, whoever drives it. ``read``: the claim's group's rows."""
    key = _key(conversation_id)
    if key is None:
        raise RunRefused("not_found", "Conversation not found.")
    row, shared = read.take(key) if read is not None else (None, None)
    conversation = readable_one(user_id, key, row) if user_id is not None else None
    if conversation is None:
        inactive = owned_by(user_id).filter(id=key, owner__is_active=False)
        if user_id is not None and inactive.exists():
            raise RunRefused("forbidden", "This account cannot run prompts.")
        raise RunRefused("not_found", "Conversation not found.")
    if not allows(conversation.role, DRIVE):
        raise RunRefused("forbidden", "You may read this conversation but not prompt in it.")
    # Every prompt of a shared conversation names its author, the owner's too, so each
    # user part shows who wrote it; a conversation never shared keeps its events as before.
    if conversation.owner_id == user_id:
        if shared is None:
            shared = conversation.memberships.exists()
        shared = conversation.team or shared
        return conversation, (conversation.owner.get_username() if shared else None)
    author = User.objects.filter(pk=user_id).values_list("username", flat=True).first()
    return conversation, author


def _keep_images(conversation_id, owner_id: int, images: list[attachments.Snapshot]) -> None:
    try:
        attachments.store(conversation_id, owner_id, images)
    except attachments.ImageRefused as exc:
        raise RunRefused("quota_exceeded", str(exc)) from exc


def _claiming(conversation_id, branch, process, until, title=None):
    """The claim's UPDATE: running, leased to this process; only if no prompt runs and
    its branch is still the one read."""
    # ``updated`` is the conversation's last activity, which orders the lists: a run started
    # (a prompt, a regenerate, a compaction) is activity; renaming or settings are not.
    changes = {"state": Conversation.State.RUNNING, "lease_owner": process, "lease_until": until,
               "updated": timezone.now()}  # fmt: skip
    if title is not None:
        changes["title"] = title
    idle = Conversation.objects.filter(id=conversation_id, active_branch=branch)
    return idle.exclude(state=Conversation.State.RUNNING), changes


@dataclass(frozen=True)
class _Claim:
    conversation_id: Any
    user_id: int | None
    prompt: str | None
    remember: bool = False
    branch_from: tuple[str, int] | None = None
    images: tuple[attachments.Snapshot, ...] = ()
    read: _Read | None = field(default=None, compare=False)  # the group's rows (_Read)


async def claim(conversation_id, user_id, prompt: str | None, remember: bool = False,
                branch_from: tuple[str, int] | None = None,
                images: list[attachments.Snapshot] = ()) -> Setup:  # fmt: skip
    """Mark the conversation running, or refuse when a prompt already runs; a prompt typed
    in the page also joins the sender's prompt history. ``user_id``: who sends it, the
    owner or a collaborator (quotas and budget are the owner's). ``branch_from``:
    (``edit`` or ``regenerate``, a prompt's seq): the run starts a new branch there
    (docs/API.md), with the claim: a refused prompt leaves the tree as it was.
    ``images``: snapshots of the attached images, kept with it too.

    A prompt's start is the largest fixed cost of a run (the benchmark's profile): the
    claims that arrive together are made together, in one transaction on the claims' own
    thread (agent/server/grouping.py), each in a savepoint of its own."""
    group = grouping.for_loop("harness-claims", _claim_together, abandoned=_give_back,
                              workers=CLAIM_WORKERS, most=CLAIM_GROUP)  # fmt: skip
    request = _Claim(conversation_id, user_id, prompt, remember, branch_from, tuple(images))
    setup = await group.submit(request)
    # Each claim's workspace apart: a new user's is made (their sandbox's host started),
    # and a group of new users' first prompts would otherwise all wait for the last one.
    try:
        await _prepare(setup)
    except asyncio.CancelledError:
        _give_back(request, setup)
        raise
    return setup


# Groups of claims handled at once: a slow claim (a large image, a row lock held
# elsewhere) holds up only the claims grouped with it.
CLAIM_WORKERS = 2
CLAIM_GROUP = 8
# Workspaces prepared at once (mostly waiting on the broker and the user's sandbox).
PREPARE = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="prepare")
_giving_back: set[asyncio.Task] = set()


def _give_back(request: _Claim, setup: Setup) -> None:
    """A claim made for a caller that was cancelled meanwhile (a client gone): released,
    or the conversation would stay running, with no run, until its lease lapsed."""
    task = asyncio.ensure_future(release(setup.conversation.id))
    _giving_back.add(task)
    task.add_done_callback(_giving_back.discard)


async def _prepare(setup: Setup) -> None:
    await database_sync_to_async(_prepare_blocking, thread_sensitive=False,
                                 executor=PREPARE)(setup)  # fmt: skip


def _prepare_blocking(setup: Setup) -> None:
    """The claimed run's workspace and system prompt (committed claims only)."""
    try:
        setup.workspace = conversation_workspace(
            setup.conversation, workspace_for(setup.conversation.owner_id)
        )
        setup.system = build_system_prompt(
            setup.workspace, setup.config.system_prompt,
            deployment=DeploymentInstructions.current(),
            conversation=setup.conversation.instructions,
        )  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the manager releases the claim
        setup.unprepared = exc


def _claim_together(requests: list[_Claim]) -> list[Setup | BaseException]:
    """The group's claims in one transaction; a refusal undoes only its own savepoint. If
    the transaction fails (a database error, not a refusal), each claim is tried alone, so
    one claim's failure never refuses another."""

    def together(group: list[_Claim]) -> list[Setup | RunRefused]:
        read = _Read.of(group)
        results: list[Setup | RunRefused | None] = [None] * len(group)
        for index in sorted(range(len(group)), key=lambda i: read.lock_order(group[i])):
            results[index] = _attempt(replace(group[index], read=read))
        return results

    return grouping.together_or_alone(requests, together, _attempt, "claims")


def _attempt(request: _Claim) -> Setup | RunRefused:
    try:
        with transaction.atomic():  # (in the group's transaction: a savepoint)
            return _claim(request)
    except RunRefused as refused:
        return refused


# Without a model key the offline demo answers, and it can answer only the built-in loop: a
# CLI would retry the gateway's refusal for minutes while holding a run slot.
CLI_NEEDS_MODEL = (
    "CLI agents need a real model, and this server runs the offline demo (no "
    "ANTHROPIC_API_KEY is set): use the built-in agent."
)

CLI_NEEDS_BASH = (
    "CLI agents run commands themselves, and commands are switched off for "
    "this account (or this server has no sandbox): use the built-in agent."
)


def _claim(request: _Claim) -> Setup:
    conversation_id, user_id, prompt = request.conversation_id, request.user_id, request.prompt
    branch_from, images = request.branch_from, request.images
    conversation, author = driven_by(conversation_id, user_id, request.read)
    owner = conversation.owner
    owner_id = owner.pk
    if conversation.state == Conversation.State.RUNNING:  # before quotas: the reason
        raise RunRefused("prompt_running", ALREADY_RUNNING)
    if conversation.agent != "harness" and not owner.bash_enabled:
        # A CLI agent runs commands itself: where bash is off, so are the CLIs.
        raise RunRefused("forbidden", CLI_NEEDS_BASH)
    config = agent_config(model=conversation.model).with_thinking(conversation.thinking)
    config = config.replace(approval=conversation.approval or config.approval)
    if conversation.agent != "harness" and config.offline:
        raise RunRefused("agent_unavailable", CLI_NEEDS_MODEL)
    if not config.offline:  # (the demo costs nothing)
        check_budget(owner)
    # The per-minute limit protects spend: the offline demo model costs nothing.
    check_quotas(owner, per_minute=not config.offline)
    changes = {
        "state": Conversation.State.RUNNING,
        "lease_owner": PROCESS_ID,
        "lease_until": _lease_deadline(),
    }
    titled = not conversation.title and prompt is not None  # (None: a compaction)
    if titled:
        changes["title"] = title_from_prompt(prompt)
    # (the branch read above: one switched meanwhile would get another's history)
    idle, claiming = _claiming(conversation.id, conversation.active_branch, PROCESS_ID,
                               changes["lease_until"], changes.get("title"))  # fmt: skip
    claimed = idle.update(**claiming)
    if not claimed:  # running, here or in another process
        raise RunRefused("prompt_running", ALREADY_RUNNING)
    for name, value in changes.items():
        setattr(conversation, name, value)
    if titled:  # (the lists that show it are redrawn once the claim commits)
        conversation_named.send(sender=Conversation, conversation=conversation)
    fork_seq = 0
    if branch_from is not None:
        from agent.runs.branches import branch_off  # (it raises this module's refusal)

        fork_seq = branch_off(conversation, *branch_from)
    if images:
        _keep_images(conversation_id, owner_id, images)
    if request.remember and prompt is not None:
        sender = owner if user_id == owner_id else User.objects.get(pk=user_id)
        sender.remember_prompt(prompt)
        User.objects.filter(pk=user_id).update(prompt_history=sender.prompt_history)
    bash_mode = sandbox_bash_mode(owner.bash_enabled)  # off without bubblewrap too
    refs = tuple(snapshot.ref for snapshot in images)
    return Setup(conversation, config, titled, bash_mode, author, branch_from is not None,
                 fork_seq, refs)  # fmt: skip


@partial(database_sync_to_async, thread_sensitive=False)
def check_queueing(conversation_id, user_id: int,
                   images: list[attachments.Snapshot] = ()) -> str | None:  # fmt: skip
    """A prompt about to be queued on a running one: the conversation drivable by the
    sender, its owner active, the owner's budget and per-minute limit, as for a prompt
    that starts a run (``RunRefused``: refused now, as that prompt would be, rather than
    when it is delivered); its images are kept. Returns the prompt's author (None: not
    shared)."""
    with transaction.atomic():
        conversation, author = driven_by(conversation_id, user_id)
        if not agent_config(model=conversation.model).offline:
            check_budget(conversation.owner)
            check_rate(conversation.owner)
        if images:
            _keep_images(conversation_id, conversation.owner_id, images)
    return author


@partial(database_sync_to_async, thread_sensitive=False)
def remember_prompt(owner_id: int, prompt: str) -> None:
    """A prompt typed in the page and queued (not claimed) joins the prompt history too."""
    with transaction.atomic():
        owner = User.objects.select_for_update().filter(id=owner_id).first()
        if owner is not None:
            owner.remember_prompt(prompt)
            owner.save(update_fields=["prompt_history"])


@partial(database_sync_to_async, thread_sensitive=False)
def release(conversation_id) -> None:
    Conversation.objects.filter(id=conversation_id).update(
        state=Conversation.State.IDLE, lease_owner="", lease_until=None
    )


@partial(database_sync_to_async, thread_sensitive=False)
def finish(
    conversation_id, messages: list[dict[str, Any]], last_seq: int, state: str | None = None
) -> None:
    """The run's final save; ``state``: set it here too (its status event was not stored)."""
    changes: dict[str, Any] = {"state": state} if state is not None else {}
    Conversation.objects.filter(id=conversation_id, lease_owner=PROCESS_ID).update(
        history=messages, last_seq=last_seq, lease_owner="", lease_until=None, **changes
    )
