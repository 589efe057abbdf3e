"""A part drawn through the per-process cache (agent/ui/part_html.py) is what its template
draws for the page, for every kind of part; what changes in a part (a card's result, an
answer's cost), or the conversation it is shown in, is drawn anew."""

from __future__ import annotations

import uuid
from dataclasses import replace
from types import SimpleNamespace

import pytest
from django.template.loader import render_to_string

from agent.core.events import (
    ApprovalEvent,
    CheckpointEvent,
    CompactionEvent,
    ErrorEvent,
    ReasoningEvent,
    StatusEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    UsageEvent,
    UserEvent,
)
from agent.ui.part_html import part_html
from agent.ui.transcript import Transcript

IMAGE = {"sha256": "ab" * 32, "media_type": "image/png", "name": "shot <1>.png"}
EVENTS = [
    UserEvent(seq=1, content="read <a.py> please", images=[IMAGE], author="ann"),
    StatusEvent(seq=2, state="thinking"),
    ReasoningEvent(seq=3, content="Let me <look>."),
    ToolCallEvent(seq=4, id="toolu_1", name="read", input={"path": "a.py"}),
    ToolResultEvent(seq=5, id="toolu_1", result="x = 1\n<b>y</b>\n", isError=False),
    TextEvent(seq=6, content="**Done**: `x` is 1 <script>alert(1)</script>"),
    UsageEvent(seq=7, input_tokens=1200, output_tokens=300, cost_usd=0.0027),
    ToolCallEvent(seq=8, id="toolu_2", name="bash", input={"command": "rm -rf /"}),
    ApprovalEvent(seq=9, id="toolu_2", name="bash", input={"command": "rm -rf /"}),
    ErrorEvent(seq=10, message="The model is <overloaded>.", code="overloaded"),
    CompactionEvent(seq=11, summary="s", through_seq=9, tokens_before=9000, tokens_after=900),
    CheckpointEvent(seq=12, id="c" * 40, files=["a.py", "<b>.txt"]),
]


def conversation(project_id=None):
    return SimpleNamespace(id=uuid.uuid4(), project_id=project_id, title="t", owner=None)


def drawn_by_template(part, conv) -> str:
    return render_to_string("agent/_part.html", {"part": part, "conversation": conv})


@pytest.mark.parametrize("project_id", [None, uuid.uuid4()])
def test_every_kind_of_part_is_drawn_as_its_template_draws_it(project_id):
    conv = conversation(project_id)
    parts = Transcript.of(EVENTS).parts
    kinds = {part.kind for part in parts}
    assert kinds >= {"user", "reasoning", "tool", "text", "approval", "error", "compaction",
                     "checkpoint"}  # fmt: skip
    for part in parts:
        expected = drawn_by_template(part, conv)
        assert part_html(part, conv.id, conv.project_id) == expected  # drawn
        assert part_html(part, conv.id, conv.project_id) == expected  # from the cache


def test_a_change_in_the_part_or_its_conversation_draws_it_anew():
    conv = conversation()
    running = next(p for p in Transcript.of(EVENTS[:4]).parts if p.kind == "tool")
    done = next(p for p in Transcript.of(EVENTS[:5]).parts if p.kind == "tool")
    assert 'data-tool-status="running"' in part_html(running, conv.id, None)
    assert 'data-tool-status="ok"' in part_html(done, conv.id, None)
    text = next(p for p in Transcript.of(EVENTS[:7]).parts if p.kind == "text")
    first = part_html(text, conv.id, None)
    costlier = replace(text, usage=replace(text.usage, cost_usd=1.5))
    assert "$1.500" in part_html(costlier, conv.id, None) and "$1.500" not in first
    # The same part in another conversation links that conversation's images.
    user = Transcript.of(EVENTS[:1]).parts[0]
    other = conversation()
    assert f"/c/{other.id}/images/" in part_html(user, other.id, None)
    assert f"/c/{conv.id}/images/" in part_html(user, conv.id, None)
    # A project's conversation offers "Restore files" on its prompts; another does not.
    assert "data-restore-before" in part_html(user, conv.id, uuid.uuid4())
    assert "data-restore-before" not in part_html(user, conv.id, None)
