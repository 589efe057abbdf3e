"""The conversation as a tree: branches, their paths, and moving between
them, without ever changing or deleting a stored event.

A branch's path is its parent's path up to ``fork_seq``, then its own events. Seqs grow
across the whole conversation, so "the events of branch b up to seq s" is a plain range
and a path is a handful of (branch, seq ≤ limit) ranges, one per ancestor: one indexed
query, whatever the tree. A conversation that never branched has no Branch rows and its
path is every event (no extra condition at all).

The model's history is kept per branch: the conversation's ``history`` is the active
branch's head, the others' wait on their rows. A new branch's history is its parent's
cut where it parts, by the ``_seq`` marks the loop leaves on each message (the seq of the
last event each came with).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Max, Q

from agent.access import DRIVE, reachable_by
from agent.core import history as core_history
from agent.core import images, instructions
from agent.core.events import CompactionEvent, TextDeltaEvent, UserEvent
from agent.models import Branch, Conversation, Event
from agent.runs import attachments
from agent.runs.claim import RunRefused

EDIT, AGAIN = "edit", "regenerate"


@dataclass(frozen=True)
class Line:
    number: int
    parent: int | None
    fork_seq: int


def lines_of(conversation_id) -> dict[int, Line]:
    """The conversation's branches by number; empty when it never branched."""
    rows = Branch.objects.filter(conversation_id=conversation_id)
    return {n: Line(n, p, f) for n, p, f in rows.values_list("number", "parent", "fork_seq")}


def path_q(lines: dict[int, Line], branch: int) -> Q:
    """The condition selecting the events on ``branch``'s path (every event: no branches)."""
    if not lines:
        return Q()
    condition, limit, number = Q(), None, branch
    while True:
        own = Q(branch=number) if limit is None else Q(branch=number, seq__lte=limit)
        condition |= own
        line = lines.get(number)
        if line is None or line.parent is None:
            return condition
        limit = line.fork_seq if limit is None else min(limit, line.fork_seq)
        number = line.parent


def active_path(conversation: Conversation, branch: int | None = None) -> Q:
    number = conversation.active_branch if branch is None else branch
    return path_q(lines_of(conversation.id), number)


def _chain(lines: dict[int, Line], branch: int) -> dict[int, int | None]:
    """The branches on ``branch``'s path, each with the last seq of its own on the path
    (None: all of them)."""
    chain: dict[int, int | None] = {}
    limit, number = None, branch
    while True:
        chain[number] = limit
        line = lines.get(number)
        if line is None or line.parent is None:
            return chain
        limit = line.fork_seq if limit is None else min(limit, line.fork_seq)
        number = line.parent


def heads(conversation_id) -> dict[int, int]:
    """Each branch's newest own seq."""
    rows = (
        Event.objects.filter(conversation_id=conversation_id)
        .values("branch")
        .annotate(head=Max("seq"))
        .values_list("branch", "head")
    )
    return dict(rows)


def listing(conversation: Conversation) -> list[dict[str, Any]]:
    """``GET …/branches``: every branch with where it parts and its head."""
    lines = lines_of(conversation.id)
    tops = heads(conversation.id)
    if not lines:
        lines = {0: Line(0, None, 0)}
    return [
        {
            "id": line.number,
            "fork_seq": line.fork_seq,
            "head_seq": tops.get(line.number, line.fork_seq),
            "active": line.number == conversation.active_branch,
        }
        for line in sorted(lines.values(), key=lambda line: line.number)
    ]


@dataclass(frozen=True)
class Switch:
    """Where branches part on the active path: ``‹ index/count ›`` and the branch each
    arrow shows (None: none that way)."""

    fork_seq: int
    index: int
    count: int
    previous: int | None
    next: int | None


def switches(conversation: Conversation) -> list[Switch]:
    """The switchers the active path passes, in order of where they part."""
    lines = lines_of(conversation.id)
    if not lines:
        return []
    tops = heads(conversation.id)
    chain = _chain(lines, conversation.active_branch)
    families: dict[tuple[int, int], list[int]] = {}
    for line in lines.values():
        if line.parent is not None:
            families.setdefault((line.parent, line.fork_seq), []).append(line.number)
    found = []
    for (parent, fork), children in families.items():
        if parent not in chain:
            continue
        limit = chain[parent]
        if limit is not None and limit < fork:
            continue  # the path left the parent before this point
        options = sorted(children)
        if tops.get(parent, -1) > fork:  # the parent goes on past the point itself
            options.insert(0, parent)
        current = next((n for n in options if n in chain and n != parent), None)
        if current is None:
            current = parent if parent in options else None
        if current is None or len(options) < 2:
            continue
        at = options.index(current)
        found.append(Switch(
            fork, at + 1, len(options),
            options[at - 1] if at > 0 else None,
            options[at + 1] if at + 1 < len(options) else None,
        ))  # fmt: skip
    return sorted(found, key=lambda switch: switch.fork_seq)


def cut_history(messages: list[dict[str, Any]], through: int) -> list[dict[str, Any]]:
    """The messages whose events began by seq ``through`` (each is marked with the seq of
    its last event; a message without a mark goes with the one before it), repaired so
    the API takes them: a turn cut after its tool calls gets error results for them."""
    kept, mark = [], 0
    for message in messages:
        own = message.get("_seq", mark)
        # A prompt's message begins with its ``user`` event (its mark); any other message
        # with the first event after the one before it.
        begins = own if _is_prompt(message) else mark + 1
        if begins > through:
            break
        kept.append(message)
        mark = own
    return core_history.repair(kept, "the conversation went another way here")


def _is_prompt(message: dict[str, Any]) -> bool:
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    return message.get("role") == "user" and not any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks
    )


def branch_off(conversation: Conversation, kind: str, of_seq: Any) -> int:
    """Start a new branch for an edited prompt (from just before ``of_seq``) or an answer
    given again (after it), make it active and give the conversation its history; returns
    the seq it parts after. Inside
    the claim's transaction, after the conversation was claimed: a refusal here undoes
    the claim too. ``RunRefused`` when ``of_seq`` is not a prompt on the active path."""
    if not isinstance(of_seq, int) or isinstance(of_seq, bool) or of_seq < 1:
        raise RunRefused("bad_request", "Name the prompt by its seq (a whole number).")
    lines = lines_of(conversation.id)
    path = path_q(lines, conversation.active_branch)
    on_path = Event.objects.filter(conversation=conversation).filter(path)
    target = on_path.filter(seq=of_seq).values_list("type", "branch").first()
    if target is None or target[0] != UserEvent.type:
        raise RunRefused(
            "not_a_prompt", f"#{of_seq} is not a prompt on this branch of the conversation."
        )
    if kind == AGAIN:
        fork, parent = of_seq, target[1]
    else:
        before = (
            on_path.filter(seq__lt=of_seq).exclude(type=TextDeltaEvent.type)
            .order_by("-seq").values_list("seq", "branch").first()
        )  # fmt: skip
        fork, parent = before if before is not None else (0, 0)
    _check_cuttable(on_path, fork)
    if not lines:
        Branch.objects.create(conversation=conversation, number=0, parent=None, fork_seq=0)
        lines = {0: Line(0, None, 0)}
    Branch.objects.filter(conversation=conversation, number=conversation.active_branch).update(
        history=conversation.history
    )
    number = max(lines) + 1
    Branch.objects.create(conversation=conversation, number=number, parent=parent,
                          fork_seq=fork)  # fmt: skip
    conversation.history = cut_history(conversation.history or [], fork)
    conversation.active_branch = number
    Conversation.objects.filter(id=conversation.id).update(
        active_branch=number, history=conversation.history
    )
    return fork


def last_prompt_seq(conversation_id) -> int | None:
    """The newest prompt on the active branch (regenerate's default)."""
    conversation = Conversation.objects.filter(id=conversation_id).first()
    if conversation is None:
        return None
    rows = Event.objects.filter(conversation=conversation, type=UserEvent.type)
    return (
        rows.filter(active_path(conversation))
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )


def _path_seqs(conversation_id, lines: dict[int, Line], branch: int) -> list[int]:
    rows = Event.objects.filter(conversation_id=conversation_id).filter(path_q(lines, branch))
    return list(
        rows.exclude(type=TextDeltaEvent.type).order_by("seq").values_list("seq", flat=True)
    )


def parting(conversation_id, lines: dict[int, Line], old: int, new: int) -> int:
    """The last seq two branches' paths share (0: they part at the start)."""
    shared = 0
    for a, b in zip(_path_seqs(conversation_id, lines, old),
                    _path_seqs(conversation_id, lines, new), strict=False):  # fmt: skip
        if a != b:
            break
        shared = a
    return shared


def activate(conversation: Conversation, number: Any) -> int:
    """Make branch ``number`` the active one; returns the last seq the old and new paths
    share. The model's history follows (the old head's is kept on its row). Inside a
    transaction; ``RunRefused``: ``not_found`` (no such branch), ``prompt_running`` (a
    prompt runs, or started meanwhile: the switch waits for it)."""
    lines = lines_of(conversation.id) or {0: Line(0, None, 0)}
    if not isinstance(number, int) or isinstance(number, bool) or number not in lines:
        raise RunRefused("not_found", "This conversation has no such branch.")
    old = conversation.active_branch
    if number == old:
        return conversation.last_seq
    saved = Branch.objects.filter(conversation=conversation, number=number)
    history = saved.values_list("history", flat=True).first() or []
    switched = (
        Conversation.objects.filter(id=conversation.id, active_branch=old)
        .exclude(state=Conversation.State.RUNNING)
        .update(active_branch=number, history=history)
    )
    if not switched:
        raise RunRefused("prompt_running", "A prompt is running: switch branches when it ends.")
    Branch.objects.filter(conversation=conversation, number=old).update(
        history=conversation.history
    )
    conversation.history, conversation.active_branch = history, number
    return parting(conversation.id, lines, old, number)


def switch_to(conversation_id, user_id, number: Any) -> tuple[int, int, list[dict]]:
    """Activate a branch for a user who may drive the conversation: (the branch, where it
    parts from the old one, the new path's events after that as JSON). ``RunRefused``."""
    with transaction.atomic():
        conversation = reachable_by(user_id, DRIVE).filter(id=conversation_id).first()
        if conversation is None:
            if reachable_by(user_id).filter(id=conversation_id).exists():
                raise RunRefused("forbidden", "You may read this conversation but not steer it.")
            raise RunRefused("not_found", "Conversation not found.")
        if conversation.state == Conversation.State.RUNNING:
            raise RunRefused("prompt_running", "A prompt is running: switch branches when it ends.")
        fork = activate(conversation, number)
    rows = (
        Event.objects.filter(conversation=conversation, seq__gt=fork)
        .filter(active_path(conversation)).exclude(type=TextDeltaEvent.type).order_by("seq")
    )  # fmt: skip
    return conversation.active_branch, fork, list(rows.values_list("payload", flat=True))


@transaction.atomic  # (a fork is whole or not there)
def fork_copy(conversation: Conversation, owner, at: Any) -> Conversation:
    """A new conversation of ``owner`` holding the active path up to seq ``at`` (default:
    all of it), its events renumbered 1, 2, 3… and the model's history cut there."""
    path = active_path(conversation)
    rows = (
        Event.objects.filter(conversation=conversation).filter(path)
        .exclude(type=TextDeltaEvent.type).order_by("seq")
    )  # fmt: skip
    if at is None:
        at = conversation.last_seq
    if not isinstance(at, int) or isinstance(at, bool) or at < 0:
        raise RunRefused("bad_request", "'at' must be the seq of an event (a whole number).")
    if at and not rows.filter(seq=at).exists() and at != conversation.last_seq:
        raise RunRefused("not_found", f"#{at} is not an event on this branch.")
    payloads = rows.filter(seq__lte=at).values_list("payload", flat=True)
    events = [dict(payload) for payload in payloads]
    renumbered: dict[int, int] = {}
    for number, event in enumerate(events, start=1):
        renumbered[event["seq"]] = number
        event["seq"] = number
        event.pop("branch", None)
    messages = conversation.history or []
    if at < conversation.last_seq:
        _check_cuttable(rows, at)
        messages = cut_history(messages, at)
    if owner.pk != conversation.owner_id:
        # The history holds more than the events: the subdirectories' AGENTS.md read from
        # the owner's workspace, beside tool results. A reader's copy is of what they could
        # see (a viewer may not read the owner's files), and it runs in their workspace.
        messages = instructions.without_notes(messages)
    copied = []
    for message in messages:
        message = dict(message)
        if "_seq" in message:
            earlier = [new for old, new in renumbered.items() if old <= message["_seq"]]
            message["_seq"] = max(earlier, default=0)
        copied.append(message)
    title = f"Fork of {conversation.display_title}"[:200]
    fork = Conversation.objects.create(
        owner=owner, model=conversation.model, title=title, thinking=conversation.thinking,
        approval=conversation.approval, history=copied, last_seq=len(events),
    )  # fmt: skip
    Event.objects.bulk_create(
        Event(conversation=fork, seq=e["seq"], type=e["type"], payload=e) for e in events
    )
    shown = [i.get("sha256") for e in events for i in e.get("images") or () if isinstance(i, dict)]
    if shas := list(dict.fromkeys([*images.references(copied), *shown])):
        try:
            attachments.copy(conversation.id, fork.id, owner.pk, shas)  # the fork's own
        except attachments.ImageRefused as exc:
            raise RunRefused("quota_exceeded", str(exc)) from exc
    return fork


def _check_cuttable(on_path, seq: int) -> None:
    """The model's history can be cut at ``seq`` unless a compaction summarised events
    after it: what they were is then gone from the history (the transcript keeps them)."""
    compactions = on_path.filter(type=CompactionEvent.type).values_list("payload", flat=True)
    if any(c.get("through_seq", 0) > seq for c in compactions):
        raise RunRefused("compacted", "A compaction summarised this part of the conversation: "
                         "the model no longer has it as it was, so it cannot go another way "
                         "from here. Fork or edit from after the compaction.")  # fmt: skip


def resume_point(conversation: Conversation, after: int) -> int | None:
    """None when a reader holding the path up to seq ``after`` can go on from there (it is
    on the active path); else the last seq that reader's path shares with the active one
    (it must drop what it has after that)."""
    if not after:
        return None
    lines = lines_of(conversation.id)
    if not lines:
        return None
    rows = Event.objects.filter(conversation=conversation, seq=after)
    branch = rows.values_list("branch", flat=True).first()
    if branch is None or rows.filter(path_q(lines, conversation.active_branch)).exists():
        return None  # (a seq not stored, a streamed delta's: nothing to drop)
    return parting(conversation.id, lines, branch, conversation.active_branch)
