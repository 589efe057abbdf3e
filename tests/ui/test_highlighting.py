"""A file's text highlighted by its name's type: a `read` result's card (first load and
live push alike) and the Files panel's file view; bash and grep output stay plain; and
nothing a file or a tool says can come out as anything but text."""

from __future__ import annotations

import html
import json
from html.parser import HTMLParser

import pytest
from django.template.loader import render_to_string

from agent.core.events import ToolCallEvent, ToolResultEvent
from agent.ui.cards import RESULT_LINES
from agent.ui.fragments import FragmentRenderer
from agent.ui.highlight import HIGHLIGHT_CAP, highlighted
from agent.ui.markdown import ALLOWED_CLASSES
from agent.ui.transcript import Transcript, pending_highlights
from tests.xss_corpus import xss_payloads

PYTHON = "import os\n\n\ndef main():\n    return os.getcwd()  # where\n"


def events(name: str, params: dict, payload: dict) -> list:
    return [
        ToolCallEvent(seq=1, id="t1", name=name, input=params),
        ToolResultEvent(seq=2, id="t1", result=json.dumps(payload), isError=False),
    ]


def page_card(name: str, params: dict, payload: dict) -> str:
    """The card as the first page load renders it."""
    part = Transcript.of(events(name, params, payload)).parts[0]
    return render_to_string("agent/_part.html", {"part": part})


def test_a_read_result_of_a_python_file_is_highlighted_as_python():
    card = page_card("read", {"path": "src/app.py"}, {"content": PYTHON})
    assert '<div class="tool-code"><div class="codehilite"><pre><code>' in card
    assert '<span class="kn">import</span>' in card  # a keyword, as Python's lexer says
    assert '<span class="k">def</span>' in card and '<span class="c1"># where</span>' in card
    assert 'class="tool-output"' not in card


def test_the_file_type_follows_the_name():
    js = page_card("read", {"path": "web/app.js"}, {"content": "const x = 1;\n"})
    assert '<span class="kd">const</span>' in js
    for name in ("notes.unknownext", "notes.txt"):  # unknown, or plain text by its name
        plain = page_card("read", {"path": name}, {"content": "import os\n"})
        assert '<pre class="tool-output">import os\n</pre>' in plain and "codehilite" not in plain


@pytest.mark.parametrize(
    ("name", "params", "payload"),
    [
        ("bash", {"command": "cat app.py"}, {"output": PYTHON, "exit_code": 0}),
        ("grep", {"pattern": "import", "path": "app.py"}, {"matches": "app.py:1:import os\n"}),
    ],
)
def test_bash_and_grep_output_stay_plain(name, params, payload):
    card = page_card(name, params, payload)
    assert "codehilite" not in card and 'class="tool-output"' in card


def test_a_live_push_shows_the_same_card_as_the_first_load():
    renderer = FragmentRenderer()
    call, result = events("read", {"path": "app.py"}, {"content": PYTHON})
    renderer.render([call], conversation=None)
    live = renderer.render([result], conversation=None)
    loaded = page_card("read", {"path": "app.py"}, {"content": PYTHON})
    assert '<span class="kn">import</span>' in live
    start = live.index('<div class="tool-result"')
    assert live[start : live.index("</div>\n</div>", start)] in loaded


def test_only_the_lines_the_card_shows_are_highlighted_and_a_huge_text_stays_plain():
    lines = "".join(f"x_{i} = {i}\n" for i in range(RESULT_LINES + 30))
    card = page_card("read", {"path": "big.py"}, {"content": lines})
    assert card.count('<div class="codehilite">') == 2  # the first 100, then the rest
    assert "(30 more lines)" in card
    huge = "x = 1\n" * (HIGHLIGHT_CAP // 6 + RESULT_LINES + 1)
    assert highlighted(huge, "big.py") is None
    card = page_card("read", {"path": "big.py"}, {"content": huge})
    # the first 100 lines are highlighted; the rest, over the cap, is plain text
    assert card.count('<div class="codehilite">') == 1
    assert '<pre class="tool-output">x = 1\n' in card


def test_a_failed_read_is_not_highlighted():
    card = page_card("read", {"path": "app.py"}, {"error": "no such file"})
    assert "codehilite" not in card and "no such file" in card


class Structure(HTMLParser):
    """The tags, attributes and text of highlighted output."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, attrs))

    def handle_data(self, data):
        self.text.append(data)

    def handle_comment(self, data):
        self.tags.append(("!--", []))


@pytest.mark.parametrize("filename", ["app.py", "index.html", "app.js", "notes.md", "x.svg"])
def test_every_xss_corpus_payload_comes_out_as_text_only(filename):
    allowed = {("div", "class"), ("span", "class")}
    for payload in xss_payloads():
        text = payload + "\n"
        out = highlighted(text, filename)
        assert out is not None
        parsed = Structure()
        parsed.feed(out)
        parsed.close()
        for tag, attrs in parsed.tags:
            assert tag in {"div", "pre", "code", "span"}, (payload, out)
            for name, value in attrs:
                assert (tag, name) in allowed, (payload, out)
                assert set(value.split()) <= ALLOWED_CLASSES[tag], (payload, out)
        # Everything the payload said is there, as text, and nothing else.
        assert "".join(parsed.text) == text.replace("\r\n", "\n").replace("\r", "\n"), payload
        assert html.unescape(out).count("<script") <= text.count("<script")


def test_the_writer_knows_which_texts_the_fold_will_highlight():
    call, result = events("read", {"path": "src/app.py"}, {"content": PYTHON})
    bash_call, bash_result = events("bash", {"command": "ls"}, {"output": "x\n"})
    # the call in the same batch as its result, or folded in before
    assert pending_highlights(Transcript(), [call, result]) == [(PYTHON, "src/app.py")]
    assert pending_highlights(Transcript.of([call]), [result]) == [(PYTHON, "src/app.py")]
    assert pending_highlights(Transcript.of([bash_call]), [bash_result]) == []
    failed = ToolResultEvent(seq=2, id="t1", result=json.dumps({"error": "gone"}), isError=True)
    assert pending_highlights(Transcript.of([call]), [failed]) == []


async def test_a_long_read_result_is_highlighted_by_the_worker_not_on_the_event_loop(
    monkeypatch,
):
    from agent.ui import highlight, render_pool

    text = "".join(f"def f{i}(x):  # <script>{i}</script>\n    return x\n" for i in range(400))
    expected = highlight.highlight_uncached(text, "long.py")

    def not_here(*args):
        raise AssertionError("highlighted on the event loop")

    call, result = events("read", {"path": "long.py"}, {"content": text})
    renderer = FragmentRenderer()
    renderer.render([call], conversation=None)
    await render_pool.prehighlight(pending_highlights(renderer.transcript, [result]))
    monkeypatch.setattr(highlight, "highlight_uncached", not_here)
    html = renderer.render([result], conversation=None)
    head = "".join(text.splitlines(keepends=True)[:RESULT_LINES])
    assert highlight.highlighted(head, "long.py") in html
    assert expected.startswith(highlight.highlighted(head, "long.py")[:200])
    assert "<script>" not in html
