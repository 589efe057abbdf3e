"""Render a run's events as htmx out-of-band fragments for the WebSocket.

Rendered once per batch in the process that runs the prompt and broadcast to every socket
on the conversation, so a second tab costs a send, not a render. Consecutive text deltas
become one fragment of escaped text appended to the live block; when the block completes,
the live block is removed and the markdown part (rendered once) is appended in its place.
"""

from __future__ import annotations

from typing import Any

from django.template.loader import render_to_string
from django.utils.html import format_html

from .transcript import Part, apply_result, part_for, status_text, tool_view


def sync_marker(seq_from: int, seq_to: int, reply: bool = False) -> str:
    """First element of every batch: the seq range it carries. The page applies a batch
    only when it continues exactly where the page is, and asks for a sync otherwise."""
    template = (
        '<div id="sync-state" hx-swap-oob="true" data-from="{}" data-to="{}" data-sync="1" hidden>'
        "</div>"
        if reply
        else '<div id="sync-state" hx-swap-oob="true" data-from="{}" data-to="{}" hidden></div>'
    )
    return format_html(template, seq_from, seq_to)


def ws_error(message: str, code: str = "bad_frame") -> str:
    return render_to_string("agent/_ws_error.html", {"message": message, "code": code})


def status_fragment(state: str, message: str | None) -> str:
    return render_to_string(
        "agent/_status.html",
        {"status_state": state, "status_text": status_text(state, message), "oob": True},
    )


def title_fragments(conversation: Any) -> str:
    """The header title and the sidebar entry, after the first prompt named the chat."""
    title = render_to_string("agent/_title.html", {"conversation": conversation, "oob": True})
    link = format_html(
        '<a href="/c/{}/" class="conv-link current" id="conv-link-{}" aria-current="page" '
        'hx-swap-oob="true">{}</a>',
        conversation.id, conversation.id, conversation.display_title,
    )  # fmt: skip
    return title + link


class FragmentRenderer:
    """Per run: remembers its tool calls (to re-render a card with its result) and whether
    a live text block is open."""

    def __init__(self) -> None:
        self.calls: dict[str, dict[str, Any]] = {}
        self.live = False
        self.last_prompt = ""

    def render(self, events: list[dict[str, Any]], conversation: Any) -> str:
        out: list[str] = []
        parts: list[Part] = []
        deltas: list[str] = []
        first_delta_seq = 0

        def flush_parts() -> None:
            if parts:
                out.append(render_to_string("agent/_oob_append.html", {"parts": list(parts)}))
                parts.clear()

        def flush_deltas() -> None:
            if not deltas:
                return
            text = "".join(deltas)
            deltas.clear()
            if self.live:
                out.append(
                    format_html('<div hx-swap-oob="beforeend:#live-text-body">{}</div>', text)
                )
            else:
                self.live = True
                live = render_to_string(
                    "agent/_live_text.html", {"seq": first_delta_seq, "content": text}
                )
                out.append(format_html('<div hx-swap-oob="beforeend:#messages">{}</div>', live))

        for event in events:
            kind = event["type"]
            if kind == "text_delta":
                flush_parts()
                if not deltas:
                    first_delta_seq = event["seq"]
                deltas.append(event["content"])
                continue
            flush_deltas()
            if kind == "text" and self.live:
                flush_parts()
                out.append('<div hx-swap-oob="delete:#live-text"></div>')
                self.live = False
            if kind == "tool_call":
                self.calls[str(event["id"])] = event
                parts.append(Part("tool", event["seq"], tool=tool_view(event)))
            elif kind == "tool_result":
                flush_parts()
                call = self.calls.get(str(event["id"]))
                if call is not None:
                    part = Part("tool", call["seq"], tool=tool_view(call))
                    apply_result(part.tool, event)
                    out.append(
                        render_to_string("agent/_tool_card.html", {"part": part, "oob": True})
                    )
            elif kind == "status":
                flush_parts()
                if self.live and event["state"] in ("idle", "error"):
                    # The prompt ended with a block still open (its text was lost with a
                    # crashed process): the live block must not linger.
                    out.append('<div hx-swap-oob="delete:#live-text"></div>')
                    self.live = False
                out.append(status_fragment(event["state"], event.get("message")))
            elif kind == "usage":
                flush_parts()
                out.append(
                    render_to_string(
                        "agent/_meter.html", {"conversation": conversation, "oob": True}
                    )
                )
            else:
                if kind == "user":
                    self.last_prompt = event["content"]
                part = part_for(event, self.last_prompt)
                if part is not None:
                    parts.append(part)
        flush_deltas()
        flush_parts()
        return "".join(out)


def render_catch_up(events: list[dict[str, Any]], after: int, conversation: Any) -> str:
    """What a page that has everything up to ``after`` is missing, up to ``upto``: the
    stored events in between and, when a text block is streaming, that block whole (the
    page's own live block, if any, is replaced, so this is safe to apply at any point)."""
    renderer = FragmentRenderer()
    renderer.live = True  # the page may hold a live block: a completed text removes it
    calls = [e for e in events if e["type"] == "tool_call"]
    renderer.calls = {str(e["id"]): e for e in calls}
    missing = [e for e in events if after < e["seq"] and e["type"] != "text_delta"]
    html = renderer.render(missing, conversation) if missing else ""
    partial = [e for e in events if e["type"] == "text_delta"]
    if partial and partial[-1]["seq"] > after:
        text = "".join(e["content"] for e in partial)
        live = render_to_string(
            "agent/_live_text.html", {"seq": partial[0]["seq"], "content": text}
        )
        html += '<div hx-swap-oob="delete:#live-text"></div>'
        html += format_html('<div hx-swap-oob="beforeend:#messages">{}</div>', live)
    return sync_marker(after + 1, conversation.last_seq, reply=True) + html
