"""A project conversation's ``checkpoint`` events as the transcript shows them: a small
line with its files (escaped, bidi controls visible), the same live and on reload; one
with no file changed kept hidden. A project conversation's prompts offer to restore."""

from __future__ import annotations

from types import SimpleNamespace

from django.template.loader import render_to_string

from agent.core.events import CheckpointEvent, UserEvent
from agent.ui.fragments import FragmentRenderer
from agent.ui.transcript import Transcript

HOSTILE = "src/<img src=x onerror=alert(1)>\u202egnp.exe"
PROJECT = SimpleNamespace(id="c0ffee00-0000-0000-0000-000000000000", project_id="p1")
PLAIN = SimpleNamespace(id="c0ffee00-0000-0000-0000-000000000000", project_id=None)


def events():
    return [CheckpointEvent(seq=1, id="a" * 40, files=[]),
            UserEvent(seq=2, content="change it"),
            CheckpointEvent(seq=3, id="b" * 40, files=["a.txt", HOSTILE])]  # fmt: skip


def page_of(events, conversation) -> str:
    context = {"parts": Transcript.of(events).parts, "conversation": conversation}
    return render_to_string("agent/_messages.html", context)


def test_checkpoints_fold_into_parts_with_their_files():
    parts = Transcript.of(events()).parts
    assert [(p.kind, p.seq) for p in parts] == [("checkpoint", 1), ("user", 2), ("checkpoint", 3)]
    assert parts[2].content == "b" * 40 and parts[2].files == ("a.txt", HOSTILE)


def test_the_line_is_the_same_live_and_on_reload_and_escapes_paths():
    page = page_of(events(), PROJECT)
    live = FragmentRenderer().render(events(), PROJECT)
    for html in (page, live):
        line = html.split(f'data-checkpoint="{"b" * 40}"')[1].split("</details>")[0]
        assert "files changed: 2" in line and "<code>a.txt</code>" in line
        assert "<img" not in line and "&lt;img src=x onerror=alert(1)&gt;" in line
        assert "\u202e" not in line and "⟨U+202E⟩" in line
        start = html.split(f'data-checkpoint="{"a" * 40}"')[1].split(">")[0]
        assert "hidden" in start  # nothing changed: kept for its seq, not shown


def test_a_project_prompt_offers_restore_and_says_edit_restores():
    project = page_of(events(), PROJECT)
    assert 'data-restore-before="2"' in project and "Restore files to before this prompt" in project
    assert "files go back to before this prompt first" in project
    plain = page_of(events()[1:2], PLAIN)
    assert "data-restore-before" not in plain and "files go back" not in plain
