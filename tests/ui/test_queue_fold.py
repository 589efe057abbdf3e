"""The queue in the transcript fold and its fragments: queued, removed,
delivered (the oldest waiting of its mode), dropped with the run (a "not sent" part), and
every queued text escaped."""

from __future__ import annotations

from types import SimpleNamespace

from django.utils.html import escape

from agent.core.events import QueuedEvent, StatusEvent, UnqueuedEvent, UserEvent
from agent.ui.fragments import FragmentRenderer, render_catch_up
from agent.ui.transcript import Transcript
from tests.xss_corpus import xss_payloads

TOTALS = ("input_tokens", "output_tokens", "cost_usd", "cache_read_input_tokens",
          "cache_creation_input_tokens")  # fmt: skip
CONVERSATION = SimpleNamespace(last_seq=0, title="", **dict.fromkeys(TOTALS, 0))


def queued(seq, qid, content, mode="follow_up"):
    return QueuedEvent(seq=seq, id=qid, content=content, mode=mode)


def test_delivery_takes_the_oldest_waiting_of_its_mode_and_removal_takes_its_id():
    transcript = Transcript.of([
        UserEvent(seq=1, content="go"),
        queued(2, "f1", "follow one"), queued(3, "s1", "steer one", "steer"),
        queued(4, "f2", "follow two"), queued(5, "s2", "steer two", "steer"),
        UnqueuedEvent(seq=6, id="f1", reason="removed"),
        UserEvent(seq=7, content="steer one", mode="steer"),
    ])  # fmt: skip
    assert [(q.id, q.mode) for q in transcript.queued] == [("f2", "follow_up"), ("s2", "steer")]
    part = transcript.parts[-1]
    assert (part.kind, part.mode, part.content) == ("user", "steer", "steer one")
    assert [p.kind for p in transcript.parts] == ["user", "user"]  # a removal shows nothing


def test_prompts_dropped_with_the_run_become_not_sent_parts_in_order():
    transcript = Transcript.of([
        UserEvent(seq=1, content="go"), queued(2, "a", "first"), queued(3, "b", "second", "steer"),
        UnqueuedEvent(seq=4, id="a", reason="cancelled"),
        UnqueuedEvent(seq=5, id="b", reason="not_sent"),
        UnqueuedEvent(seq=6, id="unknown", reason="not_sent"),
    ])  # fmt: skip
    dropped = [(p.code, p.content, p.queued.id) for p in transcript.parts if p.kind == "error"]
    assert dropped == [("not_sent", "first", "a"), ("not_sent", "second", "b")]
    assert transcript.queued == []


def test_the_queue_fragment_follows_each_change_and_a_catch_up_has_it_whole():
    renderer = FragmentRenderer()
    events = [UserEvent(seq=1, content="go"), StatusEvent(seq=2, state="running_tool",
                                                          message="bash")]  # fmt: skip
    assert 'id="queue"' not in renderer.render(events, CONVERSATION)
    html = renderer.render([queued(3, "aa", "later")], CONVERSATION)
    assert 'hx-swap-oob="true"' in html and 'data-queued="aa"' in html
    html = renderer.render([queued(4, "bb", "now", "steer")], CONVERSATION)
    assert 'data-queued="aa"' in html and 'data-queued="bb"' in html
    html = renderer.render([UnqueuedEvent(seq=5, id="aa", reason="removed")], CONVERSATION)
    assert 'data-queued="aa"' not in html and 'data-queued="bb"' in html
    # A page at seq 4 that missed the removal: the queue it gets back is whole.
    everything = [*events, queued(3, "aa", "later"), queued(4, "bb", "now", "steer"),
                  UnqueuedEvent(seq=5, id="aa", reason="removed")]  # fmt: skip
    caught_up = render_catch_up(everything, 4, SimpleNamespace(**{**vars(CONVERSATION),
                                                                   "last_seq": 5}))  # fmt: skip
    assert 'data-queued="bb"' in caught_up and 'data-queued="aa"' not in caught_up


def test_queued_text_is_escaped_in_the_queue_and_in_not_sent_parts():
    risky = [p for p in xss_payloads() if "<" in p and len(p) >= 8][:400]
    assert risky
    for n, payload in enumerate(risky):
        renderer = FragmentRenderer()
        html = renderer.render([
            UserEvent(seq=1, content="go"), queued(2, f"{n:x}", payload),
            UnqueuedEvent(seq=3, id=f"{n:x}", reason="cancelled"),
        ], CONVERSATION) + renderer.render([queued(4, "ff", payload)], CONVERSATION)  # fmt: skip
        assert payload not in html, payload
        assert escape(payload) in html
