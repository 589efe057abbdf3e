"""A catch-up that brings a prompt brings the conversation's name too: the name went out with
that prompt's live batch only, which the page did not apply (dropped while its sync was in
flight, or lost); the heading it swaps is what the tab's title and the list's entry follow."""

from __future__ import annotations

from agent.core import events as ev
from agent.models import Conversation
from agent.ui.fragments import render_catch_up

EVENTS = [ev.UserEvent(content="name it now").with_seq(1),
          ev.TextEvent(content="Named.").with_seq(2)]  # fmt: skip


def test_a_catch_up_with_a_prompt_brings_the_name_and_one_without_does_not():
    named = Conversation(model="m", title="name it now")
    html = render_catch_up(EVENTS, after=0, conversation=named)
    assert '<span id="conv-title" class="conv-title" hx-swap-oob="true">name it now</span>' in html
    assert 'id="conv-title"' not in render_catch_up(EVENTS, after=1, conversation=named)
    assert 'id="conv-title"' not in render_catch_up(EVENTS, 0, Conversation(model="m"))


def test_a_renames_heading_is_escaped():
    from agent.ui.fragments import title_fragment

    html = title_fragment('<img src=x onerror="alert(1)"> & co')
    assert html.strip() == ('<span id="conv-title" class="conv-title" hx-swap-oob="true">'
                    "&lt;img src=x onerror=&quot;alert(1)&quot;&gt; &amp; co</span>")  # fmt: skip
