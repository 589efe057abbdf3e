"""The one place a prompt is accepted, for the page's socket and the API alike.

Its text first (present, within ``HARNESS_MAX_PROMPT_CHARS``) and its mode (none, or
``follow_up`` / ``steer``), then the run layer's claim: the conversation
reachable and idle, the owner active and within their quotas, the storage able to take it.
With a mode, a prompt sent while one runs is queued on it instead (wherever it runs). A
refusal is a ``RunRefused`` whose code each adapter shows in its medium.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings

from agent.core.events import QUEUE_MODES
from agent.models import Conversation, Event
from agent.runs import attachments, rewind
from agent.runs.attachments import Snapshot
from agent.runs.branches import AGAIN, EDIT, last_prompt_seq, switch_to
from agent.runs.broadcast import announce_branch
from agent.runs.claim import ALREADY_RUNNING, RunRefused, driven_by
from agent.runs.manager import runs


def checked_text(content) -> str:
    """The prompt's text, or ``RunRefused`` (``empty_prompt``, ``prompt_too_large``)."""
    if not isinstance(content, str) or not content.strip():
        raise RunRefused("empty_prompt", "Type a prompt first.")
    limit = settings.HARNESS_MAX_PROMPT_CHARS
    if len(content) > limit:
        raise RunRefused(
            "prompt_too_large",
            f"The prompt is {len(content):,} characters; the limit is {limit:,}. Nothing was sent.",
        )
    return content


def checked_mode(mode) -> str | None:
    """The prompt's queue mode (None: none given), or ``RunRefused`` (``bad_mode``)."""
    if mode is None:
        return None
    if not isinstance(mode, str) or mode not in QUEUE_MODES:
        shown = str(mode)[:40]
        raise RunRefused("bad_mode", f'Unknown mode {shown!r}: use "follow_up" or "steer".')
    return mode


def checked_seq(seq):
    """A prompt named by its seq (``edit_of``, ``of``): a whole number, checked before any
    claim so that a malformed request holds nothing; or ``RunRefused`` (``bad_request``)."""
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise RunRefused("bad_request", "Name the prompt by its seq (a whole number).")
    return seq


# What identifies a queued prompt (the run layer makes them: uuid4().hex).
QUEUE_ID_CHARS = frozenset("0123456789abcdef")


def is_queue_id(value) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 64 and set(value) <= QUEUE_ID_CHARS


def _snapshot_images(conversation_id, user_id: int, paths: list[str],
                     queued: bool) -> list[Snapshot]:  # fmt: skip
    """The attached images, read from the owner's workspace, for one who may prompt here
    (a viewer learns nothing of the owner's files); ``RunRefused`` naming what is wrong.
    A prompt that would be refused for running now is, before anything is read."""
    conversation, _ = driven_by(conversation_id, user_id)
    if not queued and conversation.state == Conversation.State.RUNNING:
        raise RunRefused("prompt_running", ALREADY_RUNNING)
    if conversation.agent != "harness":
        raise RunRefused("bad_image", "This agent reads images from the workspace: name "
                         "the file's path in the prompt instead.")  # fmt: skip
    try:
        return attachments.snapshot(conversation.owner_id, paths)
    except attachments.ImageRefused as exc:
        raise RunRefused("bad_image", str(exc)) from exc


def _edited_images(conversation_id, user_id: int, seq: int) -> list[Snapshot]:
    """An edited prompt keeps the images of the one it replaces (none given instead)."""
    driven_by(conversation_id, user_id)  # (only for one who may prompt here)
    return attachments.of_prompt(conversation_id, seq)


async def checked_images(conversation_id, user, value, queued: bool = False) -> list[Snapshot]:
    """The prompt's ``images`` (workspace paths), each read and checked;
    or ``RunRefused`` (``bad_request``, ``bad_image``)."""
    try:
        paths = attachments.checked_paths(value)
    except attachments.ImageRefused as exc:
        raise RunRefused("bad_request", str(exc)) from exc
    if not paths:
        return []
    read = sync_to_async(_snapshot_images, thread_sensitive=False)
    return await read(conversation_id, user.pk, paths, queued)


async def accept_prompt(
    conversation_id, user, content, mode=None, *, remember: bool = False, edit_of=None,
    images=None, restore_files=True,
) -> str | None:  # fmt: skip
    """Start the prompt on the conversation or, with a ``mode`` while one runs, queue it
    (its queue id is returned); or raise ``RunRefused`` saying why not. ``remember``: it
    joins the user's prompt history (the page's prompts, not the API's). ``edit_of``: the
    seq of an earlier prompt this one replaces, on a new branch.
    ``images``: workspace paths of images attached to it. ``restore_files``: an edit in a
    project conversation first restores the files of before that prompt."""
    text, mode = checked_text(content), checked_mode(mode)
    checked_flag(restore_files)
    if edit_of is not None:
        checked_seq(edit_of)
    taken = await checked_images(conversation_id, user, images, queued=mode is not None)
    if images is None and edit_of is not None:
        taken = await sync_to_async(_edited_images, thread_sensitive=False)(
            conversation_id, user.pk, edit_of
        )
    if edit_of is not None:
        if mode is not None:
            raise RunRefused("bad_request", "An edited prompt cannot be queued.")
        await runs.start(conversation_id, user.pk, text, remember=remember,
                         branch_from=(EDIT, edit_of), images=taken,
                         restore_files=restore_files)  # fmt: skip
        return None
    if mode is None:
        await runs.start(conversation_id, user.pk, text, remember=remember, images=taken)
        return None
    return await runs.submit(conversation_id, user.pk, text, mode, remember=remember,
                             images=taken)  # fmt: skip


async def regenerate(conversation_id, user, of_seq=None, restore_files=True) -> None:
    """Answer a prompt again on a new branch (default: the last prompt on
    the active branch); or ``RunRefused`` saying why not. ``restore_files``: in a project
    conversation, first the files of before that prompt."""
    checked_flag(restore_files)
    if of_seq is None:
        of_seq = await sync_to_async(last_prompt_seq)(conversation_id)
        if of_seq is None:
            raise RunRefused("not_a_prompt", "There is no prompt to answer again.")
    checked_seq(of_seq)
    await runs.start(conversation_id, user.pk, None, branch_from=(AGAIN, of_seq),
                     restore_files=restore_files)  # fmt: skip


async def switch_branch(conversation_id, user, number, restore_files=True) -> int:
    """Show and continue another branch; every open page re-draws and
    every stream gets the ``branch`` event. Returns where the branches part; or
    ``RunRefused`` (``not_found``, ``prompt_running``, ``forbidden``). ``restore_files``:
    a project conversation's files become that branch's newest checkpoint."""
    checked_flag(restore_files)
    await runs.settled(conversation_id)  # a run that has answered lets the conversation go
    active, fork, events = await sync_to_async(switch_to, thread_sensitive=False)(
        conversation_id, user.pk, number
    )
    await announce_branch(conversation_id, active, fork, events)
    if restore_files:
        await rewind.restore_branch(conversation_id)
    return fork


def checked_flag(value) -> None:
    if not isinstance(value, bool):
        raise RunRefused("bad_request", "'restore_files' must be true or false.")


async def start_compaction(conversation_id, user) -> None:
    """Compact the conversation's history now, as a run of its own; or
    raise ``RunRefused`` (``prompt_running`` while one runs, a quota…)."""
    await runs.start(conversation_id, user.pk, None)


async def remove_queued(conversation_id, queue_id, *, running: bool = True) -> bool:
    """Take a queued prompt out of the running prompt's queue; False when it is not there."""
    if not is_queue_id(queue_id):
        return False
    return await runs.unqueue(conversation_id, queue_id, running=running)


DECISIONS = ("approve", "deny")
REASON_MAX = 2000  # characters of a denial's reason given to the model


def checked_decision(decision, reason) -> tuple[str, str | None]:
    """A decision on a tool call and its reason, or ``RunRefused``
    (``bad_request``)."""
    if not isinstance(decision, str) or decision not in DECISIONS:
        raise RunRefused("bad_request", '\'decision\' must be "approve" or "deny".')
    if reason is not None and (not isinstance(reason, str) or len(reason) > REASON_MAX):
        raise RunRefused("bad_request", f"'reason' must be a string of at most {REASON_MAX} "
                         "characters.")  # fmt: skip
    return decision, (reason.strip() or None) if reason else None


def _decided_before(conversation_id, call_id: str) -> bool:
    return Event.objects.filter(
        conversation_id=conversation_id, type="approval_decision", payload__id=call_id
    ).exists()


async def decide_approval(
    conversation_id,
    user,
    call_id,
    decision,
    reason=None,
    *,
    approve_all: bool = False,
    running: bool = True,
) -> None:
    """Approve or deny a tool call waiting for a decision, wherever its run is; or raise
    ``RunRefused``: ``not_found`` when no such call waits, ``already_decided``.
    ``running``: whether the conversation was seen running (if not, no process is asked)."""
    decision, reason = checked_decision(decision, reason)
    if not isinstance(call_id, str) or not 0 < len(call_id) <= 200:
        raise RunRefused("not_found", "No tool call waits for a decision with this id.")
    outcome = await runs.decide(
        conversation_id, call_id, decision, reason, user.get_username(),
        approve_all=approve_all, running=running,
    )  # fmt: skip
    if outcome == "decided":
        return
    if outcome == "already" or await sync_to_async(_decided_before)(conversation_id, call_id):
        raise RunRefused("already_decided", "This tool call was already decided.")
    raise RunRefused("not_found", "No tool call waits for a decision with this id.")
