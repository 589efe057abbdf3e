"""Each answer shows what its model calls used (tokens and cost), summed from its usage
events: on the first page, in live frames as calls complete, after a catch-up, in the admin."""

from __future__ import annotations

import re

from agent.core import events as ev
from agent.models import Conversation
from agent.ui.fragments import FragmentRenderer, render_catch_up
from agent.ui.transcript import Transcript, answer_ends

CONVERSATION = Conversation(model="claude-haiku-4-5")  # unsaved: what the templates read


def numbered(*events: ev.Event) -> list[ev.Event]:
    return [e.with_seq(n) for n, e in enumerate(events, 1)]


def usage(i: int, o: int, cost: float, cached: int = 0) -> ev.UsageEvent:
    return ev.UsageEvent(input_tokens=i, output_tokens=o, cost_usd=cost,
                         cache_read_input_tokens=cached)  # fmt: skip


EVENTS = numbered(
    ev.UserEvent(content="first"),  # 1
    ev.TextEvent(content="Let me look."),  # 2
    ev.ToolCallEvent(id="t1", name="read", input={"path": "a"}),  # 3
    usage(1000, 50, 0.004, cached=200),  # 4: the first call
    ev.ToolResultEvent(id="t1", result="x", isError=False),  # 5
    ev.TextEvent(content="Done."),  # 6
    usage(1300, 100, 0.006),  # 7: the second call
    ev.StatusEvent(state="idle"),  # 8
    ev.UserEvent(content="second"),  # 9
    ev.TextEvent(content="Sure."),  # 10
    usage(10, 5, 0.5),  # 11
)


def costs(html: str) -> dict[str, str]:
    return dict(re.findall(r'class="answer-cost" data-answer="(\d+)"[^>]*>([^<]*)<', html))


def test_an_answers_text_parts_carry_the_sum_of_its_calls_and_the_next_prompt_starts_anew():
    texts = [p for p in Transcript.of(EVENTS).parts if p.kind == "text"]
    first, last = texts[0].usage, texts[1].usage
    assert first is last and (first.input_tokens, first.output_tokens) == (2500, 150)
    assert first.tokens == 2650 and first.cost_text == "$0.010"
    assert texts[2].usage.prompt_seq == 9 and texts[2].usage.cost_text == "$0.500"
    assert answer_ends(Transcript.of(EVENTS).parts) == {6, 10}


def test_a_cheap_answer_shows_fractions_of_a_cent_and_one_without_usage_shows_nothing():
    cheap = Transcript.of(numbered(ev.UserEvent(content="q"), ev.TextEvent(content="a"),
                                   usage(10, 2, 0.00012)))  # fmt: skip
    assert cheap.parts[1].usage.cost_text == "$0.0001"
    html = FragmentRenderer().render(numbered(ev.UserEvent(content="q"),
                                              ev.TextEvent(content="a")), CONVERSATION)  # fmt: skip
    assert costs(html) == {"1": ""}  # the place a live frame fills in


def test_live_frames_update_every_copy_of_the_answers_cost_as_its_calls_complete():
    renderer = FragmentRenderer()
    html = renderer.render(EVENTS[:4], CONVERSATION)
    assert "hx-swap-oob=\"outerHTML:.answer-cost[data-answer='1']\"" in html
    assert "1250 tokens · $0.0040" in html
    html = renderer.render(EVENTS[4:8], CONVERSATION)
    assert re.search(r'hx-swap-oob="outerHTML:[^"]+"[^>]*>2650 tokens · \$0\.010<', html)


def test_a_catch_up_counts_the_calls_the_page_already_had():
    html = render_catch_up(EVENTS, after=5, conversation=CONVERSATION)
    shown = re.findall(r'data-answer="1"[^>]*>([^<]*)<', html)
    # The new text part counts the call before it (not from zero); the later call's frame
    # then brings the whole, which the page applies last.
    assert shown == ["1250 tokens · $0.0040", "2650 tokens · $0.010"]
