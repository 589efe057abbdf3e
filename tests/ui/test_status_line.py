"""The status line and the cancelled part, as the Transcript fold and its fragments show
them: a cancelled prompt is stopped (neutral, not an error), a streaming block is being
written (not "Thinking"), and a new prompt clears the last one's ending."""

from __future__ import annotations

import re

from django.template.loader import render_to_string

from agent.core.events import (
    ErrorEvent,
    StatusEvent,
    TextDeltaEvent,
    TextEvent,
    UserEvent,
)
from agent.ui.fragments import FragmentRenderer
from agent.ui.transcript import StatusView, Transcript


def statuses(html: str) -> list[tuple[str, str]]:
    """(data-state, text) of each #status fragment, in order."""
    found = re.findall(
        r'<div id="status" data-state="([a-z_]+)"[^>]*><span class="status-text">([^<]*)</span>',
        html,
    )
    return [(state, text) for state, text in found]


def cancelled_run(start: int = 1):
    return [
        UserEvent(seq=start, content="talk"),
        StatusEvent(seq=start + 1, state="thinking"),
        TextEvent(seq=start + 2, content="partial"),
        ErrorEvent(seq=start + 3, message="Cancelled", code="cancelled"),
        StatusEvent(seq=start + 4, state="error", message="Cancelled"),
    ]


def test_a_cancelled_prompt_says_stopped_not_error():
    transcript = Transcript.of(cancelled_run())
    view = transcript.status_view()
    assert view == StatusView("error", "Stopped · Cancelled", "cancelled")
    part = transcript.parts[-1]
    html = render_to_string("agent/_part.html", {"part": part})
    assert 'data-part="error"' in html and 'data-code="cancelled"' in html
    assert "stopped" in html and "Stopped" in html and ">Error<" not in html
    assert "Retry" not in html
    live = FragmentRenderer().render(cancelled_run(), conversation=None)
    assert statuses(live)[-1] == ("error", "Stopped · Cancelled")
    assert 'data-code="cancelled" role="status"' in live


def test_other_errors_still_say_error():
    events = [
        UserEvent(seq=1, content="hi"),
        ErrorEvent(seq=2, message="Overloaded", code="overloaded"),
        StatusEvent(seq=3, state="error", message="Overloaded"),
    ]
    transcript = Transcript.of(events)
    assert transcript.status_view() == StatusView("error", "Error: Overloaded", "overloaded")
    html = render_to_string("agent/_part.html", {"part": transcript.parts[-1]})
    assert ">Error<" in html and "Retry" in html


def test_the_status_says_writing_while_text_streams():
    renderer = FragmentRenderer()
    html = renderer.render(
        [UserEvent(seq=1, content="hi"), StatusEvent(seq=2, state="thinking")], None
    )
    assert statuses(html)[-1] == ("thinking", "Thinking...")
    html = renderer.render([TextDeltaEvent(seq=3, content="Hel")], None)
    assert statuses(html) == [("thinking", "Writing…")]
    html = renderer.render([TextDeltaEvent(seq=4, content="lo")], None)
    assert statuses(html) == []  # unchanged: not sent again
    # A status event in between (a new turn) keeps saying "Writing" while the block streams.
    html = renderer.render(
        [StatusEvent(seq=5, state="thinking"), TextDeltaEvent(seq=6, content="!")], None
    )
    assert statuses(html) and all(text == "Writing…" for _, text in statuses(html))
    html = renderer.render([TextEvent(seq=7, content="Hello!")], None)
    assert statuses(html) == [("thinking", "Thinking...")]
    folded = Transcript.of(
        [StatusEvent(seq=1, state="thinking"), TextDeltaEvent(seq=2, content="x")]
    )
    assert folded.status_view().text == "Writing…"


def test_a_new_prompt_clears_the_last_error():
    events = cancelled_run() + [UserEvent(seq=6, content="again")]
    assert Transcript.of(events).status_view() == StatusView()
    # A follow-up inside a running prompt does not clear what the running one shows.
    running = [UserEvent(seq=1, content="a"), StatusEvent(seq=2, state="thinking")]
    follow_up = Transcript.of([*running, UserEvent(seq=3, content="b")])
    assert follow_up.status_view() == StatusView("thinking", "Thinking...")
