"""The loop's vocabulary: what a prompt, a decision and a run's end are, and its refusals."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from agent.core.images import ImageRef

MAX_QUEUED = 20  # prompts waiting in one run's queue
STEERED = "not run: the user sent a steering message before this call ran"
KEEP_EXCHANGES = 2  # a compaction asked for keeps the last exchanges as they are
DECISIONS = ("approve", "deny")


class PromptAlreadyRunning(RuntimeError):
    def __init__(self) -> None:
        super().__init__("a prompt is already running; wait for it or cancel it")


class NotRunning(RuntimeError):
    """A prompt was queued on a loop that runs none (it may have just finished)."""


class QueueFull(RuntimeError):
    pass


class CallRefused(Exception):  # noqa: N818 - a refusal, raised like one
    """Raised by a loop's ``guard`` to refuse a model call (the owner's budget is spent):
    nothing is asked of the model and the run ends with an error of ``code``."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class RunFailed(Exception):
    """Ends a run as an ``error`` event of ``code`` and an error status."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


# Awaited before each model call that costs (a turn, a compaction); raises CallRefused.
Guard = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class QueuedPrompt:
    id: str
    content: str
    mode: str  # steer | follow_up; "" for the prompt that starts a run
    author: str = ""  # who sent it, on a shared conversation
    images: tuple[ImageRef, ...] = ()  # attached to it


@dataclass(frozen=True, slots=True)
class RunResult:
    state: Literal["idle", "error"]
    message: str | None = None
    code: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """The user's decision on a tool call waiting for approval."""

    decision: Literal["approve", "deny"]
    reason: str | None = None
    by: str = ""


# Asks for a decision on a call (``{"id", "name", "input"}``): the CLI's terminal. Without
# one, the loop waits on a future that ``decide`` resolves (no thread, nothing held).
Approver = Callable[[dict[str, Any]], Awaitable[Decision]]


def denied_message(reason: str | None) -> str:
    reason = (reason or "").strip()
    return "denied by the user" + (f": {reason}" if reason else " (no reason given)")
