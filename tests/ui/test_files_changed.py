"""A batch with a result of a tool that changes files tells the page's Files panel, once."""

from __future__ import annotations

import json

import pytest

from agent.core.events import ToolCallEvent, ToolResultEvent
from agent.ui.fragments import FragmentRenderer

MARKER = '<div id="files-changed" hx-swap-oob="true"'


def call(seq: int, name: str) -> ToolCallEvent:
    return ToolCallEvent(seq=seq, id=f"t{seq}", name=name, input={"path": "a.txt"})


def result(seq: int, of: int) -> ToolResultEvent:
    return ToolResultEvent(seq=seq, id=f"t{of}", result=json.dumps({"ok": True}), isError=False)


@pytest.mark.parametrize("name", ["write", "edit", "bash"])
def test_a_result_of_a_tool_that_changes_files_tells_the_panel(name):
    renderer = FragmentRenderer()
    assert MARKER not in renderer.render([call(1, name)], conversation=None)  # only a call
    html = renderer.render([result(2, of=1)], conversation=None)
    assert html.count(MARKER) == 1 and 'data-seq="2"' in html.split(MARKER)[1]


@pytest.mark.parametrize("name", ["read", "grep", "list_dir"])
def test_reading_tools_do_not(name):
    renderer = FragmentRenderer()
    assert MARKER not in renderer.render([call(1, name), result(2, of=1)], conversation=None)


def test_once_per_batch_however_many_results():
    events = [call(1, "write"), result(2, of=1), call(3, "bash"), result(4, of=3)]
    html = FragmentRenderer().render(events, conversation=None)
    assert html.count(MARKER) == 1 and 'data-seq="4"' in html.split(MARKER)[1]
