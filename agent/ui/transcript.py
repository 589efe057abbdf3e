"""Parts (user / text / tool / reasoning / approval / compaction / error / checkpoint) built
from stored events.

The same part objects feed the page and the live WebSocket fragments, so a reload shows
exactly what streamed. Tool output is shown as text (templates escape it); only model text
goes through the markdown seam.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agent.core.events import (
    ApprovalDecisionEvent,
    ApprovalEvent,
    CheckpointEvent,
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
    UsageEvent,
    UserEvent,
)
from agent.ui.cards import ApprovalView, ToolView, apply_result, approval_view, tool_view
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
# Errors that are the model's or the loop's limits, not a failure: labelled "Notice".
NOTICES = frozenset({"max_turns", "max_tokens", "refusal", "nothing_to_compact"})
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
class AnswerUsage:
    """What one answer's model calls used, summed from its usage events: its action row
    shows it (``_answer_cost.html``), and live frames update it as calls complete."""

    prompt_seq: int  # the prompt it answers: the page's hook for it
    input_tokens: int = 0  # all the calls' input, cached or not
    output_tokens: int = 0
    cost_usd: float = 0.0
    # A text part of the answer is on the page (it holds a copy): what a live frame's
    # update targets. Before one (a cancel's partial text, a tool call first) none exists.
    shown: bool = False

    def add(self, event: UsageEvent) -> None:
        self.input_tokens += (event.input_tokens + event.cache_read_input_tokens
                              + event.cache_creation_input_tokens)  # fmt: skip
        self.output_tokens += event.output_tokens
        self.cost_usd += event.cost_usd

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def cost_text(self) -> str:
        """Dollars to a tenth of a cent (a cheap answer to a hundredth of one)."""
        return f"${self.cost_usd:.4f}" if self.cost_usd < 0.01 else f"${self.cost_usd:.3f}"


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
    tool_seq: int = 0  # approval parts: their call's card, which they follow directly
    prompt_seq: int = 0  # text parts: the prompt they answer (Regenerate)
    switch: Any = None  # a branches.Switch: versions part just before this part
    usage: AnswerUsage | None = None  # text parts: their answer's tokens and cost, so far
    files: tuple = ()  # checkpoint parts: the paths changed since the previous checkpoint

    @property
    def is_notice(self) -> bool:
        """An error part that reports a limit, not a failure."""
        return self.code in NOTICES


@dataclass
class QueuedView:
    """A prompt waiting in the running prompt's queue."""

    id: str
    content: str
    mode: str
    seq: int


def is_queue_event(event: Event) -> bool:
    """Whether the event changes the queue: queued, unqueued, or a queued prompt delivered."""
    return isinstance(event, (QueuedEvent, UnqueuedEvent)) or (
        isinstance(event, UserEvent) and event.mode is not None
    )


COMPACTING = "Compacting"  # the first status of a compaction asked for (core/loop.py)
STOPPED_TEXT = "Stopped · Cancelled"  # a cancelled prompt: neutral, not an error
WRITING_TEXT = "Writing…"  # a text block is streaming (the state is still `thinking`)


def status_text(state: str, message: str | None) -> str:
    return STATUS_TEXT.get(state, "").format(message=message or "")


@dataclass(frozen=True)
class StatusView:
    """What the status line shows: the state (the fixed values of ``StatusEvent``), its
    text, and the code of the error that ended the prompt (``cancelled`` is shown as
    neutral)."""

    state: str = "idle"
    text: str = ""
    code: str = ""


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
            scratch = ToolView(id=event.id, name="")  # no path: not highlighted
            apply_result(scratch, event)
            if not scratch.error:
                jobs += [(text, paths[event.id]) for text in (scratch.head, scratch.rest) if text]
    return jobs


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
        self.last_prompt_seq = 0  # … and its seq (an answer's Regenerate names it)
        self.live: LiveText | None = None
        self.status: StatusEvent | None = None  # the last one (None: a new prompt began)
        self.error_code = ""  # of the last error since the last prompt
        self.queue: dict[str, QueuedView] = {}  # by id, in the order they were queued
        self.usage: AnswerUsage | None = None  # of the answer since the last prompt

    def answering(self, prompt: UserEvent) -> None:
        """The events to come answer ``prompt``, which is not among them (a catch-up's
        earlier prompt, the prompt a regenerate answers again)."""
        self.last_prompt, self.last_prompt_seq = prompt.content, prompt.seq
        self.usage = None

    def answer_usage(self) -> AnswerUsage:
        if self.usage is None:
            self.usage = AnswerUsage(self.last_prompt_seq)
        return self.usage

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
            self._place(part)
        return part

    def _place(self, part: Part) -> None:
        """At the end, but for an approval: right after its call's card. A turn's calls
        all come before the first of them asks, so at the end the first call's card and its
        question would be apart, and the reader would not see which call it asks about."""
        if part.tool_seq:
            for index in range(len(self.parts) - 1, -1, -1):
                if self.parts[index].seq == part.tool_seq:
                    self.parts.insert(index + 1, part)
                    return
        self.parts.append(part)

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
            self.usage = None
            if self.status is not None and self.status.state in ("idle", "error"):
                self.status = None  # a new prompt: the last one's ending is stale
                self.error_code = ""
            return Part("user", event.seq, content=event.content, mode=event.mode or "",
                        author=event.author or "", images=_images(event))  # fmt: skip
        if isinstance(event, TextEvent):
            self.live = None  # the block is complete
            html = render_markdown(event.content)
            usage = self.answer_usage()
            usage.shown = True
            return Part("text", event.seq, content=event.content, html=html,
                        prompt_seq=self.last_prompt_seq, usage=usage)  # fmt: skip
        if isinstance(event, ToolCallEvent):
            part = self.tools[event.id] = Part("tool", event.seq, tool=tool_view(event))
            return part
        if isinstance(event, ApprovalEvent):
            call = self.tools.get(event.id)
            part = Part("approval", event.seq, approval=approval_view(event),
                        tool_seq=call.seq if call is not None else 0)  # fmt: skip
            self.approvals[event.id] = part
            return part
        if isinstance(event, ReasoningEvent):
            return Part("reasoning", event.seq, content=event.content)
        if isinstance(event, CompactionEvent):
            detail = f"{event.tokens_before:,} → {event.tokens_after:,} tokens"
            html = render_markdown(event.summary)
            return Part("compaction", event.seq, content=event.summary, html=html, detail=detail)
        if isinstance(event, CheckpointEvent):  # a project's worktree recorded (its id)
            files = tuple(f for f in event.files or () if isinstance(f, str))
            return Part("checkpoint", event.seq, content=str(event.id), files=files)
        if isinstance(event, ErrorEvent):
            self.error_code = event.code
            retry = self.last_prompt if event.code not in NOT_RETRYABLE else ""
            return Part("error", event.seq, content=event.message, code=event.code, retry=retry)
        if isinstance(event, UsageEvent):  # the meter shows the conversation's totals
            self.answer_usage().add(event)
        return None

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


def answer_ends(parts: list[Part]) -> set[int]:
    """The seqs of each answer's last text part (where its action row and cost show), for a
    page without the chat page's script (the admin's), which marks them itself as they come."""
    ends, ended = set(), True
    for part in reversed(parts):
        if part.kind == "user":
            ended = True
        elif part.kind == "text":
            if ended:
                ends.add(part.seq)
            ended = False
    return ends
