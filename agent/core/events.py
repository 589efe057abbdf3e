"""The closed set of events an agent run emits.

Every event carries ``seq`` (1, 2, 3… per conversation, assigned by the harness) and
``timestamp`` (Unix milliseconds). Events stay these typed objects through the core and
the run layer; only at an edge (the CLI's JSON lines, the event log, the channel layer, the
SSE stream) does ``to_dict`` give the wire JSON, and ``from_dict`` reads it back. One
serialisation for all of them.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

StatusState = Literal["thinking", "running_tool", "waiting_input", "idle", "error"]
QueueMode = Literal["steer", "follow_up"]
QUEUE_MODES: tuple[str, ...] = ("steer", "follow_up")


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    type: ClassVar[str] = "event"
    seq: int = 0
    timestamp: int = field(default_factory=now_ms)
    # The branch it belongs to when that is not the first: set by the
    # event log's readers; the loop never knows branches.
    branch: int = 0

    def to_dict(self) -> dict[str, Any]:
        data = {"type": self.type}
        for name in _field_names(type(self)):
            data[name] = getattr(self, name)
        if not data["branch"]:
            del data["branch"]
        return data

    def with_seq(self, seq: int) -> Event:
        """A copy numbered ``seq``: what ``dataclasses.replace`` does in half the time (no
        look at the class's fields, no ``__init__``; the fields were checked when this one
        was made). It runs once per streamed delta."""
        cls = type(self)
        copy = object.__new__(cls)
        for name in _field_names(cls):
            object.__setattr__(copy, name, getattr(self, name))
        object.__setattr__(copy, "seq", seq)
        return copy


@dataclass(frozen=True, slots=True, kw_only=True)
class _ContentEvent(Event):
    """An event that carries a text: a prompt, an answer or a part of one, reasoning."""

    content: str


def _without_none(data: dict[str, Any], *names: str) -> dict[str, Any]:
    for name in names:
        if data.get(name) is None:
            data.pop(name, None)
    return data


@dataclass(frozen=True, slots=True, kw_only=True)
class UserEvent(_ContentEvent):
    """A prompt; ``mode`` when it was queued while the agent ran and delivered in that run
    (``steer`` or ``follow_up``), absent for a prompt that started a run."""

    type: ClassVar[str] = "user"
    mode: QueueMode | None = None
    # Who sent it (a username), on a shared conversation; absent otherwise.
    author: str | None = None
    # Images attached to it: ``[{"sha256", "media_type", "name"}]``.
    images: list[dict[str, str]] | None = None

    def to_dict(self) -> dict[str, Any]:
        return _without_none(Event.to_dict(self), "mode", "author", "images")


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDeltaEvent(_ContentEvent):
    type: ClassVar[str] = "text_delta"


@dataclass(frozen=True, slots=True, kw_only=True)
class TextEvent(_ContentEvent):
    type: ClassVar[str] = "text"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningEvent(_ContentEvent):
    type: ClassVar[str] = "reasoning"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallEvent(Event):
    type: ClassVar[str] = "tool_call"
    id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultEvent(Event):
    type: ClassVar[str] = "tool_result"
    id: str
    result: str
    isError: bool  # noqa: N815 - the wire name of the seed protocol
    # Structured data for the UI only (a diff, an exit code…); never sent to the model.
    display: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusEvent(Event):
    type: ClassVar[str] = "status"
    state: StatusState
    message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _without_none(Event.to_dict(self), "message")


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageEvent(Event):
    type: ClassVar[str] = "usage"
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cost_usd: float = 0.0
    context_tokens: int = 0  # the call's whole input (what fills the context window)
    context_window: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent(Event):
    type: ClassVar[str] = "error"
    message: str
    code: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionEvent(Event):
    """The history before ``through_seq`` was summarised: later calls send the summary."""

    type: ClassVar[str] = "compaction"
    summary: str
    through_seq: int
    tokens_before: int
    tokens_after: int


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedEvent(Event):
    """A prompt sent while the agent ran, waiting in the run's queue."""

    type: ClassVar[str] = "queued"
    id: str
    content: str
    mode: QueueMode
    author: str | None = None  # as a ``user`` event's

    def to_dict(self) -> dict[str, Any]:
        return _without_none(Event.to_dict(self), "author")


@dataclass(frozen=True, slots=True, kw_only=True)
class UnqueuedEvent(Event):
    """A queued prompt that left the queue without being delivered. ``reason``: ``removed``
    (someone took it out), ``cancelled`` (the run was cancelled) or ``not_sent`` (the run
    ended otherwise: an error, the server stopping); the last two give its text back."""

    type: ClassVar[str] = "unqueued"
    id: str
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _without_none(Event.to_dict(self), "reason")


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalEvent(Event):
    """A tool call waiting for the user's decision; ``id`` is the call's."""

    type: ClassVar[str] = "approval"
    id: str
    name: str
    input: dict[str, Any]
    # For the UI only: what exactly will run when it is not in the input (an edit's diff,
    # computed read only from the file as it is).
    display: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return _without_none(Event.to_dict(self), "display")


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalDecisionEvent(Event):
    """The decision on an ``approval``: ``approve`` or ``deny``, by whom (a username, or
    ``terminal`` for the CLI), with the reason a denial gave the model."""

    type: ClassVar[str] = "approval_decision"
    id: str
    decision: str
    by: str = ""
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _without_none(Event.to_dict(self), "reason")


@dataclass(frozen=True, slots=True, kw_only=True)
class BranchEvent(Event):
    """The conversation now shows branch ``active``: what a reader has
    after ``fork_seq`` is replaced by the events that follow. Never stored; its ``seq`` is
    ``fork_seq`` (a stream resumed from it replays the new branch from there)."""

    type: ClassVar[str] = "branch"
    active: int
    fork_seq: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointEvent(Event):
    """A project conversation's worktree was recorded (docs/API.md, "Projects"): ``id``,
    the checkpoint's commit; ``files``, the paths changed since the previous one."""

    type: ClassVar[str] = "checkpoint"
    id: str
    files: list[str] = field(default_factory=list)


# The token counts of a usage event, summed into a conversation's totals.
USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens",
                "cache_creation_input_tokens")  # fmt: skip


def _field_names(cls: type[Event]) -> tuple[str, ...]:
    # Computed once per class: serialising is on the streaming path (every delta).
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


_FIELDS: dict[type, tuple[str, ...]] = {}

TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        UserEvent,
        TextDeltaEvent,
        TextEvent,
        ReasoningEvent,
        ToolCallEvent,
        ToolResultEvent,
        StatusEvent,
        UsageEvent,
        ErrorEvent,
        CompactionEvent,
        QueuedEvent,
        UnqueuedEvent,
        ApprovalEvent,
        ApprovalDecisionEvent,
        BranchEvent,
        CheckpointEvent,
    )
}


def from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event from its wire JSON (the event log stores exactly ``to_dict``).
    Fields it does not know are left out; one it lacks takes its default."""
    cls = TYPES[data["type"]]
    return cls(**{name: data[name] for name in _field_names(cls) if name in data})
