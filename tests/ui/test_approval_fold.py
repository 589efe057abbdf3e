"""Approval parts in the transcript fold, its fragments and the export:
pending with its controls, decided (by whom, why), closed with its run; what will run is
shown escaped; a catch-up after the card re-renders it once decided."""

from __future__ import annotations

from agent.core.events import ApprovalDecisionEvent, ApprovalEvent, StatusEvent, ToolCallEvent
from agent.ui.export import conversation_markdown
from agent.ui.fragments import FragmentRenderer, render_catch_up
from agent.ui.transcript import Transcript
from tests.ui.test_queue_fold import CONVERSATION

COMMAND = {"command": "rm -rf <b>build</b>"}


def waiting(seq=1, name="bash", params=None, **kw):
    params = COMMAND if params is None else params
    message = f"Waiting for approval: {name}"
    return [ToolCallEvent(seq=seq, id="toolu_1", name=name, input=params),
            ApprovalEvent(seq=seq + 1, id="toolu_1", name=name, input=params, **kw),
            StatusEvent(seq=seq + 2, state="waiting_input", message=message)]  # fmt: skip


def test_a_pending_card_shows_the_command_escaped_with_its_controls():
    html = FragmentRenderer().render(waiting(), CONVERSATION)
    assert 'data-part="approval"' in html and 'data-approval-state="pending"' in html
    assert "rm -rf &lt;b&gt;build&lt;/b&gt;" in html and "<b>build" not in html
    for decision in ("approve", "approve-all", "deny"):
        assert f'data-decision="{decision}"' in html
    assert 'data-state="waiting_input"' in html and "Waiting for approval: bash" in html


def test_a_decision_rerenders_the_card_out_of_band_without_controls():
    renderer = FragmentRenderer()
    renderer.render(waiting(), CONVERSATION)
    decided = ApprovalDecisionEvent(seq=4, id="toolu_1", decision="deny", reason="<no>", by="ann")
    html = renderer.render([decided], CONVERSATION)
    assert 'id="approval-2"' in html and 'hx-swap-oob="true"' in html
    assert 'data-approval-state="deny"' in html and "Denied by ann: &lt;no&gt;" in html
    assert "data-decision=" not in html


def test_a_run_that_ends_first_closes_the_card_and_a_catch_up_knows_the_card():
    events = [*waiting(), StatusEvent(seq=4, state="error", message="Cancelled")]
    html = render_catch_up(events, after=3, conversation=CONVERSATION)
    assert 'data-approval-state="closed"' in html and "data-decision=" not in html
    parts = Transcript.of(events).parts
    assert [p.kind for p in parts] == ["tool", "approval"] and parts[1].approval.closed


def test_an_edit_card_shows_the_diff_read_from_the_file_else_its_text():
    params = {"path": "a.py", "old_str": "x = 1", "new_str": "x = 2"}
    diff = "--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n keep\n-x = 1\n+x = 2\n"
    (part,) = [p for p in Transcript.of(waiting(name="edit", params=params,
                                                display={"kind": "diff", "diff": diff})).parts
               if p.kind == "approval"]  # fmt: skip
    assert ("diff-ctx", " keep") in part.approval.diff
    (part,) = [p for p in Transcript.of(waiting(name="edit", params=params)).parts
               if p.kind == "approval"]  # fmt: skip
    assert ("diff-add", "+x = 2") in part.approval.diff


def test_the_export_says_who_decided():
    events = [*waiting(), ApprovalDecisionEvent(seq=4, id="toolu_1", decision="approve", by="ann")]
    markdown = conversation_markdown({"title": "t"}, [e.to_dict() for e in events])
    assert "**Approval** of `bash`" in markdown and "approved by ann" in markdown


def two_calls_asking() -> list:
    calls = [ToolCallEvent(seq=1, id="a", name="bash", input=COMMAND),
             ToolCallEvent(seq=2, id="b", name="bash", input=COMMAND)]  # fmt: skip
    return [*calls, ApprovalEvent(seq=3, id="a", name="bash", input=COMMAND)]


def test_an_approval_follows_its_own_calls_card_not_the_turns_last():
    parts = Transcript.of([*two_calls_asking(),
                           ApprovalDecisionEvent(seq=4, id="a", decision="approve", by="ann"),
                           ApprovalEvent(seq=5, id="b", name="bash", input=COMMAND)])  # fmt: skip
    assert [(p.kind, p.seq) for p in parts.parts] == [
        ("tool", 1), ("approval", 3), ("tool", 2), ("approval", 5)]  # fmt: skip


def test_a_live_approval_card_goes_after_its_calls_card_on_the_page():
    renderer = FragmentRenderer()
    renderer.render(two_calls_asking()[:2], CONVERSATION)
    html = renderer.render(two_calls_asking()[2:], CONVERSATION)
    assert '<div hx-swap-oob="afterend:#tool-1">' in html and 'id="approval-3"' in html
    assert "beforeend:#messages" not in html


def test_a_page_of_parts_never_leaves_an_approval_between_two_pages():
    from types import SimpleNamespace

    from agent.ui import paging

    seqs = [1, 3, 2, 4]  # a call, its approval, the turn's next call, …
    parts = [SimpleNamespace(seq=seq) for seq in seqs]
    shown, earlier = paging.window(parts, size=2)
    assert earlier is not None
    rest, _ = paging.window(parts, before=earlier, size=2)
    assert sorted(p.seq for p in [*rest, *shown]) == [1, 2, 3, 4]
