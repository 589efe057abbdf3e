"""Parts (seed 000's user / text / tool / reasoning, plus error) built from stored events.

The same part objects feed the page and the live WebSocket fragments, so a reload shows
exactly what streamed. Tool output is shown as text (templates escape it); only model text
goes through the markdown seam.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agent.core.events import (
    ApprovalDecisionEvent,
    ApprovalEvent,
    CompactionEvent,
    ErrorEvent,
    Event,
    QueuedEvent,
    ReasoningEvent,
    StatusEvent,
    TextDeltaEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    UnqueuedEvent,
    UserEvent,
)
from agent.ui.highlight import highlighted
from agent.ui.markdown import render_markdown

# Errors that say nothing about the prompt itself (the API was down, the stream broke, the
# server stopped): offer to send the same prompt again.
NOT_RETRYABLE = {
    "not_sent",
    "cancelled",
    "max_turns",
    "max_tokens",
    "refusal",
    "invalid_tool_input",
}
RESULT_LINES = 100  # seed 000: tool results truncated to 100 lines in the UI
LONG_RESULT_LINES = 20  # a result longer than this starts collapsed
TARGET_CHARS = 80  # a tool card's header names its target, cut to this
STATUS_TEXT = {"thinking": "Thinking...", "running_tool": "Running: {message}...",
               "waiting_input": "{message}", "error": "Error: {message}", "idle": ""}  # fmt: skip


def _images(event: UserEvent) -> tuple:
    """A prompt's attached images as its part shows them (well-formed entries only: the
    event log is read back as JSON)."""
    return tuple(
        image for image in event.images or ()
        if isinstance(image, dict) and isinstance(image.get("sha256"), str)
        and len(image["sha256"]) == 64 and all(c in HEX for c in image["sha256"])
    )  # fmt: skip


HEX = frozenset("0123456789abcdef")


@dataclass
class Part:
    kind: str  # user | text | tool | reasoning | error
    seq: int
    content: str = ""
    html: str = ""  # sanitized markdown (text parts only)
    code: str = ""  # error parts
    retry: str = ""  # error parts: the prompt a Retry button sends again
    tool: ToolView | None = None
    timestamp: int = 0  # the event's (Unix ms): shown on hover
    detail: str = ""  # compaction parts: the tokens before and after
    mode: str = ""  # user parts: steer | follow_up, for a prompt queued while the agent ran
    author: str = ""  # user parts of a shared conversation: who sent it (a username)
    images: tuple = ()  # user parts: the attached images (``{"sha256", "media_type", "name"}``)
    queued: QueuedView | None = None  # a "not sent" error part: the queued prompt it gives back
    approval: ApprovalView | None = None  # approval parts
    prompt_seq: int = 0  # text parts: the prompt they answer (Regenerate, interfaces §11)
    switch: Any = None  # a branches.Switch: versions part just before this part (§11)


@dataclass
class ApprovalView:
    """A tool call waiting for the user's decision (interfaces §9), and what exactly would
    run: the command, the content written, the change an edit makes."""

    id: str
    name: str
    target: str
    preview: str = ""  # bash: the command; write: the content
    diff: list[tuple[str, str]] = field(default_factory=list)  # edit: (css class, line)
    decision: str = ""  # "" while undecided; approve | deny
    by: str = ""
    reason: str = ""
    closed: bool = False  # the run ended without a decision (cancelled, interrupted)

    @property
    def pending(self) -> bool:
        return not self.decision and not self.closed


def approval_view(event: ApprovalEvent) -> ApprovalView:
    params = event.input if isinstance(event.input, dict) else {}
    view = ApprovalView(event.id, event.name, tool_target(event.name, params))
    if event.name == "bash":
        view.preview = str(params.get("command", ""))
    elif event.name == "write":
        view.preview = str(params.get("content", ""))
    elif event.name == "edit":
        display = event.display if isinstance(event.display, dict) else {}
        if isinstance(display.get("diff"), str):  # the file's change, read when it was asked
            lines = display["diff"].splitlines()
        else:  # (the edit will fail: old_str is not in the file once) its text alone
            old, new = str(params.get("old_str", "")), str(params.get("new_str", ""))
            lines = difflib.unified_diff(old.splitlines(), new.splitlines(), view.target,
                                         view.target, lineterm="")  # fmt: skip
        view.diff = [(_diff_class(line), line) for line in lines]
    else:
        view.preview = json.dumps(params, indent=2, ensure_ascii=False)
    return view


@dataclass
class QueuedView:
    """A prompt waiting in the running prompt's queue (interfaces §8)."""

    id: str
    content: str
    mode: str
    seq: int


def is_queue_event(event: Event) -> bool:
    """Whether the event changes the queue: queued, unqueued, or a queued prompt delivered."""
    return isinstance(event, (QueuedEvent, UnqueuedEvent)) or (
        isinstance(event, UserEvent) and event.mode is not None
    )


@dataclass
class ToolView:
    id: str
    name: str
    input_json: str
    status: str = "running"  # running | ok | error
    head: str = ""
    rest: str = ""
    more_lines: int = 0
    error: str = ""
    diff: list[tuple[str, str]] = field(default_factory=list)  # (css class, line)
    exit_code: int | None = None
    target: str = ""  # what the call works on, for the collapsed header
    lines: int = 0  # of the result's text (or its diff): a long one starts collapsed
    path: str = ""  # the file a `read` shows: its result is highlighted by this name's type
    head_html: str = ""  # head / rest highlighted (sanitized), when the file type is known
    rest_html: str = ""

    @property
    def long(self) -> bool:
        return self.lines > LONG_RESULT_LINES


def _clip(text: str, limit: int = TARGET_CHARS) -> str:
    first, *more = text.strip().splitlines() or [""]
    if len(first) > limit or more:
        return first[: limit - 1].rstrip() + "…"
    return first


def _line_range(start: Any, end: Any) -> str:
    start = start if isinstance(start, int) and not isinstance(start, bool) else None
    end = end if isinstance(end, int) and not isinstance(end, bool) else None
    if start is None and end is None:
        return ""
    return f":{start if start is not None else 1}-{end if end is not None else ''}"


def tool_target(name: str, params: Any) -> str:
    """What a call works on, as its card's header names it: ``read src/app.py:10-40``,
    ``bash ls -la``, ``grep pattern path``, ``edit path``. Plain text (templates escape it),
    one line, cut to ``TARGET_CHARS``."""
    if not isinstance(params, dict):
        return ""

    def text(key: str) -> str:
        value = params.get(key)
        return value if isinstance(value, str) else ""

    if name == "bash":
        return _clip(text("command"))
    if name == "read":
        path = text("path")
        return _clip(path + _line_range(params.get("start_line"), params.get("end_line")))
    if name == "grep":
        return _clip(" ".join(part for part in (text("pattern"), text("path")) if part))
    return _clip(text("path"))


COMPACTING = "Compacting"  # the first status of a compaction asked for (core/loop.py)
STOPPED_TEXT = "Stopped · Cancelled"  # a cancelled prompt: neutral, not an error
WRITING_TEXT = "Writing…"  # a text block is streaming (the state is still `thinking`)


def status_text(state: str, message: str | None) -> str:
    return STATUS_TEXT.get(state, "").format(message=message or "")


@dataclass(frozen=True)
class StatusView:
    """What the status line shows: the state (interfaces §4's fixed values), its text,
    and the code of the error that ended the prompt (``cancelled`` is shown as neutral)."""

    state: str = "idle"
    text: str = ""
    code: str = ""


HIGHLIGHTED_TOOLS = frozenset({"read"})  # results that are a file's text (bash, grep: plain)


def tool_view(call: ToolCallEvent) -> ToolView:
    path = call.input.get("path") if isinstance(call.input, dict) else None
    return ToolView(
        id=call.id,
        name=call.name,
        input_json=json.dumps(call.input, indent=2, ensure_ascii=False),
        target=tool_target(call.name, call.input),
        path=path if call.name in HIGHLIGHTED_TOOLS and isinstance(path, str) else "",
    )


def _main_text(payload: Any, raw: str) -> str:
    if not isinstance(payload, dict):
        return raw
    for key in ("content", "entries", "matches", "output", "result"):
        if isinstance(payload.get(key), str):
            return payload[key]
    return raw


def apply_result(view: ToolView, result: ToolResultEvent) -> None:
    raw = str(result.result)
    try:
        payload = json.loads(raw)
    except (TypeError, ValueError):
        payload = None
    view.status = "error" if result.isError else "ok"
    if isinstance(payload, dict) and isinstance(payload.get("error"), str):
        view.error = payload["error"]
        text = payload.get("output") if isinstance(payload.get("output"), str) else ""
    else:
        text = _main_text(payload, raw)
    if isinstance(payload, dict) and isinstance(payload.get("exit_code"), int):
        view.exit_code = payload["exit_code"]
    lines = text.splitlines(keepends=True)
    view.lines = len(lines)
    view.head = "".join(lines[:RESULT_LINES])
    view.rest = "".join(lines[RESULT_LINES:])
    view.more_lines = max(0, len(lines) - RESULT_LINES)
    if view.path and not view.error:  # a file's text: highlighted by its name's type
        view.head_html = highlighted(view.head, view.path) or ""
        if view.head_html and view.rest:
            view.rest_html = highlighted(view.rest, view.path) or ""
    display = result.display or {}
    if display.get("kind") == "diff" and isinstance(display.get("diff"), str):
        view.diff = [(_diff_class(line), line) for line in display["diff"].splitlines()]
        view.lines = len(view.diff)  # the diff is what the card shows (and copies)


def pending_highlights(transcript: Transcript, events: Iterable[Event]) -> list[tuple[str, str]]:
    """(text, file name) of what folding ``events`` into ``transcript`` will highlight: the
    shown pieces (head, rest) of each `read` result, for the run's writer to have done in
    the render worker first (highlighting 200 KB takes a third of a second)."""
    paths = {part.tool.id: part.tool.path for part in transcript.tools.values() if part.tool}
    jobs: list[tuple[str, str]] = []
    for event in events:
        if isinstance(event, ToolCallEvent):
            paths[event.id] = tool_view(event).path
        elif isinstance(event, ToolResultEvent) and paths.get(event.id):
            scratch = ToolView(id=event.id, name="", input_json="")  # no path: not highlighted
            apply_result(scratch, event)
            if not scratch.error:
                jobs += [(text, paths[event.id]) for text in (scratch.head, scratch.rest) if text]
    return jobs


def _diff_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "diff-file"
    if line.startswith("@@"):
        return "diff-hunk"
    if line.startswith("+"):
        return "diff-add"
    if line.startswith("-"):
        return "diff-del"
    return "diff-ctx"


@dataclass
class LiveText:
    """A text block still streaming: its deltas so far (kept as pieces and joined when
    read: a long answer's deltas must not copy the whole text each)."""

    seq: int  # of its first delta
    last_seq: int
    pieces: list[str]

    @property
    def content(self) -> str:
        return "".join(self.pieces)


class Transcript:
    """The one fold from events to page parts, for the first page load, a socket's
    catch-up and live frames alike: tool results join their call's card, an error offers
    to retry the prompt it answered, deltas build the block still streaming."""

    def __init__(self) -> None:
        self.parts: list[Part] = []
        self.tools: dict[str, Part] = {}  # by tool call id
        self.approvals: dict[str, Part] = {}  # by tool call id, undecided ones
        self.last_prompt = ""  # the prompt the events since answer (an error retries it)
        self.last_prompt_seq = 0  # … and its seq (an answer's Regenerate names it, §11)
        self.live: LiveText | None = None
        self.status: StatusEvent | None = None  # the last one (None: a new prompt began)
        self.error_code = ""  # of the last error since the last prompt
        self.queue: dict[str, QueuedView] = {}  # by id, in the order they were queued

    @property
    def queued(self) -> list[QueuedView]:
        return list(self.queue.values())

    def fold_queue(self, event: Event) -> QueuedView | None:
        """Fold an event into the queue alone; returns the prompt that left it, if any. A
        delivered prompt is the oldest waiting of its mode (the loop delivers each mode in
        order)."""
        if isinstance(event, QueuedEvent):
            self.queue[event.id] = QueuedView(event.id, event.content, event.mode, event.seq)
        elif isinstance(event, UnqueuedEvent):
            return self.queue.pop(event.id, None)
        elif isinstance(event, UserEvent) and event.mode is not None:
            for item in self.queue.values():
                if item.mode == event.mode:
                    return self.queue.pop(item.id)
        return None

    def status_view(self) -> StatusView:
        """The status line: a cancelled prompt says it stopped (not an error), a
        streaming block says it is being written, a new prompt clears the last ending."""
        status = self.status
        if status is None:
            return StatusView()
        if status.state == "error" and self.error_code == "cancelled":
            return StatusView("error", STOPPED_TEXT, "cancelled")
        if status.state == "thinking" and self.live is not None:
            return StatusView("thinking", WRITING_TEXT)
        code = self.error_code if status.state == "error" else ""
        return StatusView(status.state, status_text(status.state, status.message), code)

    def add(self, event: Event) -> Part | None:
        """Fold one event in; returns the part it added or changed (a tool result changes
        its call's part; an unknown call's result changes nothing)."""
        if isinstance(event, TextDeltaEvent):
            if self.live is None:
                self.live = LiveText(event.seq, event.seq, [])
            self.live.last_seq = event.seq
            self.live.pieces.append(event.content)
            return None
        if isinstance(event, ToolResultEvent):
            part = self.tools.get(event.id)
            if part is not None and part.tool is not None:
                apply_result(part.tool, event)
            return part
        if isinstance(event, StatusEvent):
            if event.message == COMPACTING:
                self.last_prompt = ""  # a compaction's run: an error has no prompt to retry
            self.status = event
            if event.state in ("idle", "error"):
                self.live = None  # the prompt ended: no block is streaming any more
                return self._close_approvals()
            return None
        if isinstance(event, ApprovalDecisionEvent):
            part = self.approvals.pop(event.id, None)
            if part is not None and part.approval is not None:
                part.approval.decision = event.decision
                part.approval.by, part.approval.reason = event.by, event.reason or ""
            return part
        part = self._part_for(event)
        if part is not None:
            part.timestamp = event.timestamp
            self.parts.append(part)
        return part

    def _part_for(self, event: Event) -> Part | None:
        if isinstance(event, QueuedEvent):
            self.fold_queue(event)
            return None  # shown in the queue, not the transcript
        if isinstance(event, UnqueuedEvent):
            item = self.fold_queue(event)
            if item is None or event.reason not in ("cancelled", "not_sent"):
                return None  # removed by someone: gone
            # Dropped with the run: shown as not sent, its text kept (and the page puts it
            # back into the composer).
            return Part("error", event.seq, content=item.content, code="not_sent", queued=item)
        if isinstance(event, UserEvent):
            self.fold_queue(event)
            self.last_prompt, self.last_prompt_seq = event.content, event.seq
            if self.status is not None and self.status.state in ("idle", "error"):
                self.status = None  # a new prompt: the last one's ending is stale
                self.error_code = ""
            return Part("user", event.seq, content=event.content, mode=event.mode or "",
                        author=event.author or "", images=_images(event))  # fmt: skip
        if isinstance(event, TextEvent):
            self.live = None  # the block is complete
            html = render_markdown(event.content)
            return Part("text", event.seq, content=event.content, html=html,
                        prompt_seq=self.last_prompt_seq)  # fmt: skip
        if isinstance(event, ToolCallEvent):
            part = self.tools[event.id] = Part("tool", event.seq, tool=tool_view(event))
            return part
        if isinstance(event, ApprovalEvent):
            part = Part("approval", event.seq, approval=approval_view(event))
            self.approvals[event.id] = part
            return part
        if isinstance(event, ReasoningEvent):
            return Part("reasoning", event.seq, content=event.content)
        if isinstance(event, CompactionEvent):
            detail = f"{event.tokens_before:,} → {event.tokens_after:,} tokens"
            html = render_markdown(event.summary)
            return Part("compaction", event.seq, content=event.summary, html=html, detail=detail)
        if isinstance(event, ErrorEvent):
            self.error_code = event.code
            retry = self.last_prompt if event.code not in NOT_RETRYABLE else ""
            return Part("error", event.seq, content=event.message, code=event.code, retry=retry)
        return None  # usage: shown by the meter, from the conversation's totals

    def _close_approvals(self) -> Part | None:
        """The run ended: a call still waiting will never run (its part says so). The
        last one closed is returned (a run waits on one call at a time)."""
        closed = None
        for part in self.approvals.values():
            if part.approval is not None:
                part.approval.closed = True
                closed = part
        self.approvals.clear()
        return closed

    @classmethod
    def of(cls, events: Iterable[Event]) -> Transcript:
        transcript = cls()
        for event in events:
            transcript.add(event)
        return transcript


def build_parts(events: Iterable[Event]) -> list[Part]:
    return Transcript.of(events).parts
