"""Render a run's events as out-of-band fragments for the WebSocket (static/transport.js).

Rendered once per batch in the process that runs the prompt and broadcast to every socket
on the conversation, so a second tab costs a send, not a render. Consecutive text deltas
become one frame of the live block's changes, rendered as markdown (``live.py``: finished
blocks once, the open one per frame); when the block completes, the live block is removed
and the markdown part (rendered once) is appended in its place.
"""

from __future__ import annotations

from typing import Any

from django.template.loader import render_to_string

from agent.core.events import (
    ApprovalDecisionEvent,
    ApprovalEvent,
    CompactionEvent,
    Event,
    StatusEvent,
    TextDeltaEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    UsageEvent,
    UserEvent,
)
from agent.ui import paging
from agent.ui.compiled import render
from agent.ui.live import LiveFrame, LiveMarkdown
from agent.ui.transcript import Part, StatusView, Transcript, is_queue_event


def sync_marker(seq_from: int, seq_to: int, reply: bool = False, drop_live: bool = False) -> str:
    """First element of every batch: the seq range it carries (``data-from``, ``data-to``;
    ``data-sync`` on a sync's reply), which the page reads from the parsed element. The
    page applies a batch only when it continues exactly where the page is, and asks for a
    sync otherwise. One per frame: a template compiled once. ``drop_live`` (a reply only):
    the page's live text block, if it holds one, is stale and goes before the swap."""
    context = {"seq_from": str(int(seq_from)), "seq_to": str(int(seq_to)), "drop_live": drop_live}
    return render("agent/_sync_reply_marker.html" if reply else "agent/_sync_marker.html", context)


def ws_error(message: str, code: str = "bad_frame") -> str:
    """A frame the page never sends (not JSON, an unknown action): an error part."""
    return render_to_string("agent/_ws_error.html", {"message": message, "code": code})


def composer_alert(message: str = "", code: str = "", outcome: str = "") -> str:
    """The alert beside the composer (``#composer-alert``): why a prompt was refused, or why
    the socket is closing. ``outcome`` answers a prompt frame, on its socket only:
    ``accepted`` (the alert empties and the page clears its box) or ``refused`` (the typed
    text stays where it is)."""
    context = {"message": message, "code": code, "outcome": outcome, "oob": True}
    return render_to_string("agent/_composer_alert.html", context)


def role_changed(role: str) -> str:
    """The reader's role changed (shared conversations): the page reloads to show it."""
    return render_to_string("agent/_role_changed.html", {"role": role, "oob": True})


def archived_fragment(conversation_id, archived: bool, role: str) -> str:
    """The open conversation's "Archived" mark and, for its owner, the ⋯ menu's Archive or
    Unarchive, out of band (their forms carry no CSRF token: the transport sends the page's)."""
    conversation = {"id": conversation_id, "archived": archived}
    context = {"conversation": conversation, "role": role, "oob": True}
    return render_to_string("agent/_archived.html", context)


def title_fragment(title: str) -> str:
    """The open conversation's heading (``#conv-title``), out of band: a name it was given."""
    context = {"conversation": {"display_title": title}, "oob": True}
    return render_to_string("agent/_title.html", context)


def list_refresh_fragment(conversation_id) -> str:
    """Tells the page at ``conversation_id`` to fetch its own conversation list again, out of
    band (its view, archived or not, is the page's to know)."""
    return render_to_string("agent/_conv_list_refresh.html", {"conversation_id": conversation_id,
                                                              "oob": True})  # fmt: skip


def shared_list_fragment(shared: list, current_id) -> str:
    """The sidebar's "Shared with me" (``#shared-list``), whole, after a share changed it."""
    context = {"shared": shared, "current_id": current_id, "oob": True}
    return render_to_string("agent/_shared_list.html", context)


def status_fragment(view: StatusView) -> str:
    context = {
        "status_state": view.state, "status_text": view.text, "status_code": view.code,
        "oob": True,
    }  # fmt: skip
    return render_to_string("agent/_status.html", context)


def queue_fragment(transcript: Transcript) -> str:
    """The queued prompts (``#queue``), whole: it changes rarely and is short."""
    return render_to_string("agent/_queue.html", {"queue": transcript.queued, "oob": True})


def title_fragments(conversation: Any) -> str:
    """The header title and the sidebar entry, after the first prompt named the chat."""
    context = {"conversation": conversation, "oob": True}
    return title_fragment(conversation.display_title) + render_to_string(
        "agent/_conv_link.html", context
    )


# Tools that change the workspace: their results tell an open Files panel to refresh.
WORKSPACE_TOOLS = frozenset({"write", "edit", "bash"})


def files_changed(seq: int) -> str:
    """Once per batch with a result of a tool that changes files: the page's
    ``#files-changed`` is replaced, and its script re-fetches the Files panel where it is
    (the directory or file the user has open)."""
    return render("agent/_files_changed.html", {"seq": seq})


def delete_live() -> str:
    """Removes the page's live text block."""
    return render("agent/_delete_live.html", {})


def live_block(seq: int, live: LiveMarkdown) -> str:
    """The live text block as it stands (a first page, a catch-up, a block's first frame)."""
    return render("agent/_live_text.html", {"seq": seq, "body": live.html()})


def _new_live_block(seq: int, live: LiveMarkdown) -> str:
    """A new live text block, appended to the messages."""
    return render("agent/_new_live_block.html", {"seq": seq, "body": live.html()})


def _live_frame(frame: LiveFrame) -> str:
    """A frame's changes as swaps of the live block's parts (``live.py`` names them), each
    rendered only when it changed: this runs for every frame of every stream."""
    out = []
    if frame.finished:
        out.append(_append("live-done", frame.finished))
    if frame.open_html is not None:
        out.append(render("agent/live/_open.html", {"open": frame.open_html}))
    if frame.pending:
        out.append(_append("live-pending", frame.pending))
    if frame.line_html is not None:
        out.append(render("agent/live/_line_swap.html", {"line": frame.line_html}))
    if frame.frozen:
        out.append(_append("live-frozen", frame.frozen))
    if frame.tail_html is not None:
        out.append(render("agent/live/_tail_swap.html", {"tail": frame.tail_html}))
    if frame.code:
        out.append(_append("live-code", [frame.code]))
    return "".join(out)


def _append(target: str, html: list[str]) -> str:
    return render("agent/live/_append.html", {"target": target, "html": "".join(html)})


class FragmentRenderer:
    """Per run (or per catch-up): folds its events into a ``Transcript`` and turns what
    each changes into fragments. ``live``: whether the page has a live text block open.
    ``live_unsure`` (a catch-up): the page may or may not hold one, so the fragments never
    name it (an out-of-band swap without its target is an error in the page's console); that it
    must go is kept in ``dropped_live``, for the sync marker to say."""

    def __init__(
        self, transcript: Transcript | None = None, *, live: bool = False, live_unsure: bool = False
    ) -> None:
        self.transcript = transcript or Transcript()
        self.live = live
        self.live_unsure = live_unsure
        self.dropped_live = False
        self.live_markdown: LiveMarkdown | None = None  # the block this renderer streams
        self.shown_status: StatusView | None = None  # the status line this renderer last sent

    def _status_changes(self, out: list[str], *, always: bool = False) -> None:
        """The status line, when what it shows changed (a status event always sends it):
        deltas turn "Thinking" into "Writing" and a completed text block turns it back. (A
        new prompt's stale ending is cleared by the page when the prompt is accepted, and
        by the run's first status.)"""
        view = self.transcript.status_view()
        known = self.transcript.status is not None  # (a catch-up may not know the state)
        if always or (known and view != self.shown_status):
            out.append(status_fragment(view))
            self.shown_status = view

    def _drop_live(self, out: list[str]) -> None:
        if self.live_unsure:
            self.dropped_live = True
        else:
            out.append(delete_live())

    def render(self, events: list[Event], conversation: Any) -> str:
        out: list[str] = []
        parts: list[Part] = []
        deltas: list[str] = []
        first_delta_seq = 0
        queue_changed = False
        files_seq = 0  # of the last result of a tool that changes files

        def flush_parts() -> None:
            if parts:
                context = {"parts": list(parts), "conversation": conversation}
                out.append(render_to_string("agent/_oob_append.html", context))
                parts.clear()

        def flush_deltas() -> None:
            if not deltas:
                return
            text = "".join(deltas)
            deltas.clear()
            if self.live and self.live_markdown is not None:
                self.live_markdown.feed(text)
                out.append(_live_frame(self.live_markdown.frame()))
            else:
                if self.live:  # a block this renderer did not start: replaced whole
                    self._drop_live(out)
                self.live = True
                self.live_markdown = LiveMarkdown.of(text)
                out.append(_new_live_block(first_delta_seq, self.live_markdown))
            self._status_changes(out)

        for event in events:
            if isinstance(event, TextDeltaEvent):
                flush_parts()
                if not deltas:
                    first_delta_seq = event.seq
                deltas.append(event.content)
                self.transcript.add(event)
                continue
            flush_deltas()
            queue_changed = queue_changed or is_queue_event(event)
            if isinstance(event, TextEvent) and self.live:
                flush_parts()
                self._drop_live(out)
                self.live, self.live_markdown = False, None
            part = self.transcript.add(event)
            if isinstance(event, ToolResultEvent):
                flush_parts()
                if part is not None:
                    context = {"part": part, "oob": True}
                    out.append(render_to_string("agent/_tool_card.html", context))
                    if part.tool is not None and part.tool.name in WORKSPACE_TOOLS:
                        files_seq = event.seq
            elif isinstance(event, StatusEvent | ApprovalDecisionEvent):
                flush_parts()
                if part is not None:  # an approval decided, or closed with its run
                    context = {"part": part, "oob": True}
                    out.append(render_to_string("agent/_approval.html", context))
                if isinstance(event, ApprovalDecisionEvent):
                    continue
                if self.live and event.state in ("idle", "error"):
                    # The prompt ended with a block still open (its text was lost with a
                    # crashed process): the live block must not linger.
                    self._drop_live(out)
                    self.live, self.live_markdown = False, None
                self._status_changes(out, always=True)
            elif isinstance(event, UsageEvent | CompactionEvent):
                if part is not None:
                    parts.append(part)
                flush_parts()
                context = {"conversation": conversation, "oob": True}
                out.append(render_to_string("agent/_meter.html", context))
                usage = self.transcript.usage
                # (no text part yet: the one to come shows the sum; an out-of-band swap
                # without its target is an error in the page's console)
                if isinstance(event, UsageEvent) and usage is not None and usage.shown:
                    context = {"usage": usage, "oob": True}
                    out.append(render_to_string("agent/_answer_cost.html", context))
            elif part is not None and part.tool_seq:  # an approval: after its call's card
                flush_parts()
                context = {"part": part, "conversation": conversation}
                out.append(render_to_string("agent/_approval_after_call.html", context))
            elif part is not None:
                parts.append(part)
                if isinstance(event, TextEvent):
                    flush_parts()
                    self._status_changes(out)  # written: back to "Thinking"
        flush_deltas()
        flush_parts()
        if queue_changed:
            out.append(queue_fragment(self.transcript))
        if files_seq:
            out.append(files_changed(files_seq))
        return "".join(out)


def render_catch_up(events: list[Event], after: int, conversation: Any) -> str:
    """What a page that has everything up to ``after`` is missing: the stored events in
    between and, when a text block is streaming, that block whole (the page's own live
    block, if any, is replaced, so this is safe to apply at any point)."""
    transcript = Transcript()
    for event in events:  # the calls whose results are missing (their cards get them)
        if isinstance(event, ToolCallEvent | ApprovalEvent) and event.seq <= after:
            transcript.add(event)
        elif is_queue_event(event) and event.seq <= after:  # the queue the page has
            transcript.fold_queue(event)
        if isinstance(event, UserEvent) and event.seq <= after:  # what is answered
            transcript.answering(event)
        if isinstance(event, UsageEvent) and event.seq <= after:  # … and what it used so far
            transcript.add(event)
        if isinstance(event, TextEvent) and event.seq <= after:  # the page shows its cost
            transcript.answer_usage().shown = True
    # The page may hold a live block: a completed text removes it (through the marker).
    renderer = FragmentRenderer(transcript, live=True, live_unsure=True)
    missing = [e for e in events if after < e.seq and not isinstance(e, TextDeltaEvent)]
    html = renderer.render(missing, conversation) if missing else ""
    if any(isinstance(e, UserEvent) for e in missing) and conversation.title:
        # A prompt may have named the conversation, and its name goes out with that prompt's
        # live batch only, which this page did not apply (its sync was in flight, or the
        # batch was lost): the heading, which the tab's title and the list's entry follow.
        html = title_fragment(conversation.display_title) + html
    live = Transcript.of(e for e in events if isinstance(e, TextDeltaEvent)).live
    if live is not None and live.last_seq > after:
        renderer.dropped_live = True
        html += _new_live_block(live.seq, LiveMarkdown.of(live.content))
    transcript.live = live
    if live is not None and transcript.status is not None:
        html += status_fragment(transcript.status_view())  # "Writing…" while it streams
    last = conversation.last_seq
    return sync_marker(after + 1, last, reply=True, drop_live=renderer.dropped_live) + html


def place_switches(parts: list, switches: list) -> Any:
    """Each ``‹ 2/3 ›`` switcher goes on the first part after the point
    where its versions part; returns the one with no part after it yet (a branch just
    started: it ends the transcript, and what the run streams follows it)."""
    tail = None
    for switch in switches:
        after = next((part for part in parts if part.seq > switch.fork_seq), None)
        if after is not None:
            after.switch = switch
        else:
            tail = switch
    return tail


def render_reset(events: list[Event], conversation: Any, switches: list) -> str:
    """The page's transcript anew, for a branch switch: the active path's latest parts
    (earlier ones on scroll: paging.py), its switchers, the queue and the status. The
    marker's ``data-reset`` makes the page take it whatever it had."""
    transcript = Transcript.of(events)
    tail = place_switches(transcript.parts, switches)
    parts, earlier = paging.window(transcript.parts)
    live = transcript.live
    view = transcript.status_view()
    if getattr(conversation, "state", "") == "idle":
        view = StatusView("idle", view.text if view.state == "idle" else "")
    return render_to_string("agent/_reset.html", {
        "parts": parts,
        "earlier": earlier,
        "conversation": conversation,
        "tail_switch": tail,
        "live_block": live_block(live.seq, LiveMarkdown.of(live.content)) if live else "",
        "queue": transcript.queued,
        "view": view,
    })  # fmt: skip
