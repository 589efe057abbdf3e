"""Tool cards: the collapsed header names the call's target, a long result starts
collapsed, and every result has a Copy button."""

from __future__ import annotations

import json

import pytest
from django.template.loader import render_to_string

from agent.core.events import ToolCallEvent, ToolResultEvent
from agent.ui.cards import tool_target
from agent.ui.transcript import Transcript


@pytest.mark.parametrize(
    ("name", "params", "target"),
    [
        ("read", {"path": "src/app.py", "start_line": 10, "end_line": 40}, "src/app.py:10-40"),
        ("read", {"path": "src/app.py", "start_line": 10}, "src/app.py:10-"),
        ("read", {"path": "src/app.py", "end_line": 5}, "src/app.py:1-5"),
        ("read", {"path": "src/app.py"}, "src/app.py"),
        ("bash", {"command": "ls -la"}, "ls -la"),
        ("bash", {"command": "echo one\necho two"}, "echo one…"),
        ("bash", {"command": "x" * 200}, "x" * 79 + "…"),
        ("grep", {"pattern": "def main", "path": "src", "recursive": True}, "def main src"),
        ("edit", {"path": "a.py", "old_str": "a", "new_str": "b"}, "a.py"),
        ("write", {"path": "notes/todo.md", "content": "x"}, "notes/todo.md"),
        ("list_dir", {"path": "."}, "."),
        ("bash", {"command": 3}, ""),
        ("read", "not an object", ""),
        ("mystery", {}, ""),
    ],
)
def test_the_header_names_the_target(name, params, target):
    assert tool_target(name, params) == target


def card(name: str, params: dict, output: str) -> str:
    transcript = Transcript.of(
        [
            ToolCallEvent(seq=1, id="t1", name=name, input=params),
            ToolResultEvent(seq=2, id="t1", result=json.dumps({"output": output}), isError=False),
        ]
    )
    return render_to_string("agent/_part.html", {"part": transcript.parts[0]})


def test_the_target_is_escaped_in_the_header():
    html = card("bash", {"command": "echo <script>alert(1)</script>"}, "")
    assert "<script>" not in html
    assert '<code class="tool-target" title="echo &lt;script&gt;' in html


def test_a_parameter_of_several_lines_is_shown_as_its_lines_not_as_escapes():
    """A write's content, an edit's texts, a script: read as the file would be, under the
    parameter's name; the other parameters one a line, as JSON (strings quoted)."""
    html = card("write", {"path": "src/app.py", "content": "def f():\n    return '<b>'\n",
                          "mode": None}, "")  # fmt: skip
    shown = html.split('<pre class="tool-input">', 1)[1].split("</pre>", 1)[0]
    assert shown == ('path: &quot;src/app.py&quot;\ncontent:\n  def f():\n'
                     '      return &#x27;&lt;b&gt;&#x27;\nmode: null')  # fmt: skip
    assert "\\n" not in shown
    one_line = card("bash", {"command": "ls -la", "timeout": 30}, "")
    assert '<pre class="tool-input">command: &quot;ls -la&quot;\ntimeout: 30</pre>' in one_line


def test_a_short_result_is_open_and_a_long_one_starts_collapsed():
    short = card("bash", {"command": "ls"}, "a\nb\n")
    assert 'class="tool-long"' not in short and '<pre class="tool-output">a\nb\n</pre>' in short
    assert 'class="copy copy-result"' in short
    long = card("bash", {"command": "seq 30"}, "".join(f"{i}\n" for i in range(30)))
    assert '<details class="tool-long"><summary>Show output (30 lines)</summary>' in long
    assert 'class="copy copy-result"' in long


def test_a_running_call_has_an_empty_result_area():
    transcript = Transcript.of([ToolCallEvent(seq=1, id="t1", name="bash", input={"command": "x"})])
    html = render_to_string("agent/_part.html", {"part": transcript.parts[0]})
    assert '<div class="tool-result" hx-disable></div>' in html
