"""Rendering on the listening side (agent/web/live_frames.py): a run's broadcast events
become the page's fragments once per process, with the state a run keeps from frame to
frame; a process that joins mid-stream, or misses a batch, catches up from the event log."""

from __future__ import annotations

import dataclasses
import re

import pytest

import agent.runs.eventlog as eventlog
from agent.core.events import StatusEvent, TextDeltaEvent, TextEvent, UserEvent
from agent.models import Conversation, User
from agent.runs.broadcast import shown
from agent.web.live_frames import LiveFrames

pytestmark = pytest.mark.django_db(transaction=True)

TEXT = "# Title\n\nSome **bold** words, then\n\n```python\nprint('code')\n```\n\nand the end."


def _run_events() -> list:
    """A run from seq 1: its prompt, a status, the answer's deltas, the answer, idle."""
    pieces = [TEXT[i : i + 5] for i in range(0, len(TEXT), 5)]
    events = [UserEvent(seq=1, content="go"), StatusEvent(seq=2, state="thinking")]
    events += [TextDeltaEvent(seq=3 + i, content=p) for i, p in enumerate(pieces)]
    seq = 3 + len(pieces)
    return [*events, TextEvent(seq=seq, content=TEXT), StatusEvent(seq=seq + 1, state="idle")]


def _batches(events: list, size: int = 3) -> list[dict]:
    conversation = Conversation(title="", cost_usd=0)
    return [
        {
            "type": "conversation.batch",
            "seq_from": chunk[0].seq,
            "seq_to": chunk[-1].seq,
            "events": eventlog.wire(chunk),
            "run": 1,
            "shown": shown(conversation),
        }  # fmt: skip
        for chunk in (events[i : i + size] for i in range(0, len(events), size))
    ]


@pytest.fixture
def conversation():
    user = User.objects.create_user("watcher", password="pw-watcher-123")
    return Conversation.objects.create(owner=user, model="m")


async def test_a_process_joining_mid_stream_renders_what_a_process_there_from_the_start_does(
    conversation,
):
    events = _run_events()
    batches = _batches(events)
    joined_at = 4  # the fifth batch: mid-answer
    stored_upto = batches[joined_at]["seq_from"] - 1
    await eventlog.store(conversation.id, [e for e in events if e.seq <= stored_upto])
    first, late = LiveFrames(conversation.id), LiveFrames(conversation.id)
    from_start = [await first.render(batch) for batch in batches]
    joined = [await late.render(batch) for batch in batches[joined_at:]]
    assert joined == from_start[joined_at:]
    assert (
        "live-text" in from_start[0] + from_start[1] and "<strong>bold</strong>" in from_start[-1]
    )


async def test_a_process_whose_log_lags_tries_again_until_the_log_has_caught_up(conversation):
    """Deltas are stored at most once a second: a process joining meanwhile rebuilds again
    on the next batch, and renders as the others once the log holds what it missed."""
    events = _run_events()
    batches = _batches(events, size=2)
    first, late = LiveFrames(conversation.id), LiveFrames(conversation.id)
    from_start = [await first.render(batch) for batch in batches]
    await eventlog.store(conversation.id, [e for e in events if e.seq <= 4])  # behind
    await late.render(batches[4])  # joined here, the log two batches behind
    assert late.next_seq is None  # not whole: tried again on the next batch
    await eventlog.store(conversation.id, [e for e in events if 4 < e.seq < batches[5]["seq_from"]])
    assert await late.render(batches[5]) == from_start[5]
    assert [await late.render(b) for b in batches[6:]] == from_start[6:]


async def test_each_run_starts_a_renderer_of_its_own_and_every_frame_has_its_sync_marker(
    conversation,
):
    events = _run_events()
    frames = LiveFrames(conversation.id)
    for batch in _batches(events):
        html = await frames.render(batch)
        marker = re.match(r'<div id="sync-state" hx-swap-oob="true" data-from="(\d+)" '
                          r'data-to="(\d+)"', html)  # fmt: skip
        assert marker and (int(marker[1]), int(marker[2])) == (batch["seq_from"], batch["seq_to"])
    again = [dataclasses.replace(e, seq=e.seq + 100) for e in events]
    second = _batches(again)
    for batch in second:
        batch["run"] = 101
    first_frame = await frames.render(second[0])
    assert 'data-part="user"' in first_frame  # the new run's prompt, drawn by a new renderer


async def test_a_batch_whose_rendering_failed_makes_the_next_one_start_again_from_the_log(
    conversation, monkeypatch
):
    """The failed batch is lost to the renderer too: rendering the next one on its state
    would draw the rest of the run from a wrong start."""
    from agent.ui.fragments import FragmentRenderer

    events = _run_events()
    batches = _batches(events, size=2)
    frames = LiveFrames(conversation.id)
    await frames.render(batches[0])
    assert frames.render_now(batches[1]) is not None  # the next deltas: at once
    real = FragmentRenderer.render

    def broken(self, *args):
        raise RuntimeError("a template failed")

    monkeypatch.setattr(FragmentRenderer, "render", broken)
    with pytest.raises(RuntimeError):
        frames.render_now(batches[2])
    assert frames.next_seq is None and frames.render_now(batches[3]) is None
    with pytest.raises(RuntimeError):
        await frames.render(batches[3])
    assert frames.next_seq is None
    monkeypatch.setattr(FragmentRenderer, "render", real)
    await eventlog.store(conversation.id, [e for e in events if e.seq < batches[4]["seq_from"]])
    from_start = LiveFrames(conversation.id)
    expected = [await from_start.render(batch) for batch in batches][4]
    assert await frames.render(batches[4]) == expected  # rebuilt from the log
