"""The answer still streaming is shown as markdown (agent/ui/live.py), and what a page holds
depends only on the text so far: frames applied one after another build exactly what a
catch-up renders at once, at every point, however the deltas were framed."""

from __future__ import annotations

import random
import re
from html import unescape
from html.parser import HTMLParser

import pytest

from agent.core.events import StatusEvent, TextDeltaEvent, TextEvent
from agent.ui import live as live_module
from agent.ui.fragments import FragmentRenderer, live_block, render_catch_up
from agent.ui.live import FORCE_CHARS, LiveMarkdown
from agent.ui.markdown import render_markdown
from tests.ui.test_gfm_conformance import examples, structure
from tests.ui.test_rendering import audit
from tests.xss_corpus import xss_payloads

ANSWER = """## Plan

Here are the steps:
- read `app.py`
- fix the **bug**

1. first, with a long explanation of what happens
2. second

   still the second item, after a blank line

3. third

```python
def f(x):

    return x * 2  # a blank line above, inside the fence
```
Run this:
~~~bash
make test
~~~

| name | value |
|------|------:|
| a    | 1     |

> [!NOTE]
> A quote with *emphasis* and a [link](https://example.com/a_b).

Done: ~~nothing~~ everything. A line with snake_case_names, ~/paths and 5 * 3 = 15.
"""


def long_paragraph(words: int) -> str:
    return " ".join(f"w{i} **b{i}** `c{i}` [l{i}](https://x.y/{i}) *e{i}*" for i in range(words))


VOID = {"br", "hr", "img", "input", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str]):
        self.tag, self.attrs, self.children = tag, attrs, []

    def find(self, id_: str) -> tuple[Node, int] | None:
        """(parent, index) of the element with this id."""
        for index, child in enumerate(self.children):
            if isinstance(child, Node):
                if child.attrs.get("id") == id_:
                    return self, index
                found = child.find(id_)
                if found:
                    return found
        return None

    def html(self) -> str:
        inner = "".join(c if isinstance(c, str) else c.html() for c in self.children)
        if self.tag == "#root":
            return inner
        attrs = "".join(f' {k}="{v}"' for k, v in sorted(self.attrs.items()))
        start = f"<{self.tag}{attrs}>"
        return start if self.tag in VOID else f"{start}{inner}</{self.tag}>"


class _Builder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.root = Node("#root", {})
        self.open = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.open[-1].children.append(node)
        if tag not in VOID:
            self.open.append(node)

    def handle_endtag(self, tag):
        for depth in range(len(self.open) - 1, 0, -1):
            if self.open[depth].tag == tag:
                del self.open[depth:]
                return

    def handle_data(self, data):
        self.open[-1].children.append(data)

    def handle_entityref(self, name):
        self.open[-1].children.append(f"&{name};")

    def handle_charref(self, name):
        self.open[-1].children.append(f"&#{name};")


def parse(html: str) -> Node:
    builder = _Builder()
    builder.feed(html)
    builder.close()
    return builder.root


class Page:
    """The page's #messages, applying a frame's out-of-band swaps as static/transport.js does."""

    def __init__(self, html: str = ""):
        self.root = parse(f'<div id="messages">{html}</div>')

    def apply(self, frame: str) -> None:
        for element in parse(frame).children:
            if not isinstance(element, Node):
                continue
            swap = element.attrs.pop("hx-swap-oob", "")
            if "data-drop-live" in element.attrs and (found := self.root.find("live-text")):
                del found[0].children[found[1]]  # what the page's script does first
            if swap == "true":
                found = self.root.find(element.attrs["id"])
                if found:  # (the status line and such are not modelled)
                    parent, index = found
                    parent.children[index] = element
            elif swap.startswith("beforeend:#"):
                found = self.root.find(swap.removeprefix("beforeend:#"))
                if found:
                    parent, index = found
                    parent.children[index].children.extend(element.children)
            elif swap.startswith("delete:#"):
                found = self.root.find(swap.removeprefix("delete:#"))
                if found:
                    del found[0].children[found[1]]

    def live(self) -> str:
        found = self.root.find("live-text")
        return found[0].children[found[1]].html() if found else ""


def caught_up(seq: int, text: str) -> str:
    """The live block a page that caught up at this point holds."""
    return parse(live_block(seq, LiveMarkdown.of(text))).html()


def stream(text: str, rng: random.Random, check_every: float = 1.0) -> Page:
    """Stream the text through the run's renderer in random deltas and frames, applying
    every frame to a page; at (some) frames, the page must hold what a catch-up would."""
    renderer, page = FragmentRenderer(), Page()
    seq, pos = 1, 0
    while pos < len(text):
        batch = []
        for _ in range(rng.randint(1, 4)):
            size = rng.choice((1, 2, 3, 5, 8, 20, 60))
            if pos < len(text):
                batch.append(TextDeltaEvent(seq=seq, content=text[pos : pos + size]))
                seq, pos = seq + 1, pos + size
        page.apply(renderer.render(batch, None))
        if rng.random() < check_every:
            assert page.live() == caught_up(1, text[:pos]), f"differs after {pos} characters"
    return page


@pytest.mark.parametrize("seed", range(6))
def test_frames_build_what_a_catch_up_renders_at_every_point(seed):
    rng = random.Random(seed)
    stream(ANSWER, rng)
    stream(long_paragraph(150), rng, check_every=0.2)


def test_frames_match_a_catch_up_for_every_gfm_spec_example():
    rng = random.Random(7)
    corpus = examples("conformance", "markdown", "gfm-spec.txt") + examples(
        "conformance", "markdown", "gfm-extensions.txt"
    )
    for example in corpus:
        text = example.markdown * 2  # the second copy after the first, as answers go on
        page = stream(text, rng, check_every=0.3)
        assert page.live() == caught_up(1, text), example.number


def test_the_streaming_block_is_markdown_not_raw_syntax():
    live = LiveMarkdown.of(ANSWER)
    html = live.html()
    for shown in ("<h2>Plan</h2>", "<li>read <code>app.py</code></li>", "<strong>bug</strong>",
                  "<table>", "<blockquote>", "<del>nothing</del>"):  # fmt: skip
        assert shown in html
    assert html.count("<ol>") == 1  # the loose list stays one list, numbered on
    assert "**" not in html and "| name |" not in html and "```" not in html


@pytest.mark.parametrize("upto", ["- fix", "    return", "Run this", "| a ", "> A quote", None])
def test_a_complete_answer_looks_the_same_live_and_finished(upto):
    """The blocks live, and the same text rendered at once, compared by structure (the live
    block's own wrappers set aside)."""

    def blocks(html: str) -> tuple:
        def flat(items) -> list:
            out = []
            for item in items:
                is_wrapper = isinstance(item, tuple) and item[0] == "div"
                out.extend(flat(item[2]) if is_wrapper else [item])
            return out

        return tuple(flat(structure(html)[2]))

    text = ANSWER[: ANSWER.index(upto) if upto else None]  # (ends with a whole line)
    assert blocks(LiveMarkdown.of(text).html()) == blocks(render_markdown(text))


def test_a_long_line_is_rendered_in_pieces_that_match_the_whole_paragraph():
    text = long_paragraph(120)
    live = LiveMarkdown.of(text)
    assert len(live.frozen_html) > 10  # cut into pieces...
    pieces = re.sub(r"</?span[^>]*>", "", "".join(live.frozen_html))
    tail = re.sub(r"</?span[^>]*>", "", live_module.render_inline(live.line))
    assert f"<p>{pieces}{tail}</p>" == re.sub(r"</?span[^>]*>", "", render_markdown(text))


def test_a_line_is_not_cut_where_emphasis_is_still_open():
    text = "start *" + "word " * 200 + "end* after " + "more " * 200
    live = LiveMarkdown.of(text)
    first_cut = len(live.frozen_text[0])
    assert first_cut > text.index("end*")  # not inside the open emphasis
    assert "<em>" in live.frozen_html[0]


def test_a_line_that_never_closes_is_still_cut_beyond_the_limit():
    text = "5 *" + "x " * FORCE_CHARS * 2  # an opener nothing closes
    live = LiveMarkdown.of(text)
    assert live.frozen_text and len(live.frozen_text[0]) <= FORCE_CHARS + 10


def test_per_frame_work_does_not_grow_with_the_answer(monkeypatch):
    """What is rendered per frame is bounded (finished blocks once, the open line's tail),
    however long the answer gets: the characters handed to the renderer are counted."""
    rendered: list[int] = []
    for name in ("render_inline", "render_uncached"):
        real = getattr(live_module, name)
        counted = lambda t, real=real: rendered.append(len(t)) or real(t)  # noqa: E731
        monkeypatch.setattr(live_module, name, counted)
    renderer = FragmentRenderer()
    text = long_paragraph(400) + "\n\n" + "x" * 10 + "\n\n" + long_paragraph(400)
    per_frame = []
    for seq, at in enumerate(range(0, len(text), 30), start=1):
        rendered.clear()
        renderer.render([TextDeltaEvent(seq=seq, content=text[at : at + 30])], None)
        per_frame.append(sum(rendered))
    assert len(text) > 40_000
    assert max(per_frame) <= FORCE_CHARS + live_module.LINE_BLOCK_CHARS + 100


def test_finished_blocks_are_rendered_once(monkeypatch):
    calls: list[str] = []
    real = live_module.render_markdown
    monkeypatch.setattr(live_module, "render_markdown", lambda t: calls.append(t) or real(t))
    live = LiveMarkdown()
    for start in range(0, len(ANSWER), 7):
        live.feed(ANSWER[start : start + 7])
        live.frame()
    assert len(calls) == len(set(calls)) >= 6


def test_an_open_code_fence_grows_by_appending_escaped_text():
    live = LiveMarkdown.of("```html\n<b>one</b>\n")
    assert '<code id="live-code">&lt;b&gt;one&lt;/b&gt;\n</code>' in live.html()
    live.feed("<script>alert(1)</script>\n``")  # the partial last line may close it: held
    frame = live.frame()
    assert frame.code == "&lt;script&gt;alert(1)&lt;/script&gt;\n" and frame.open_html is None
    live.feed("`\n")
    frame = live.frame()
    assert frame.finished and '<span class="p">&lt;</span>' in frame.finished[0]  # highlighted


@pytest.mark.parametrize("joiner", ["\n\n", "\n", " "])
def test_every_xss_payload_streams_inert(joiner):
    """The corpus as one answer, streamed: as separate blocks, as one block of lines and as
    one long line (each of the live block's ways of showing text)."""
    payloads = xss_payloads()
    text = joiner.join(p.replace("\n", " ") if joiner == " " else p for p in payloads)
    renderer, app_markup = (
        FragmentRenderer(),
        re.compile(
            r'<div hx-swap-oob="[^"]*">|<div class="part text live"[^>]*>'
            r'|<(div|span)( class="md")? id="live-[a-z]+"( hx-swap-oob="true")?>'
            r'|<code id="live-code">'
        ),
    )
    for seq, at in enumerate(range(0, len(text), 40), start=1):
        html = renderer.render([TextDeltaEvent(seq=seq, content=text[at : at + 40])], None)
        assert audit(app_markup.sub("", html)) == [], text[max(0, at - 200) : at + 40]


def test_a_completed_block_replaces_the_live_one():
    renderer, page = FragmentRenderer(), Page()
    page.apply(renderer.render([TextDeltaEvent(seq=1, content="Some **bold")], None))
    assert "<strong>" not in page.live() and "Some" in page.live()
    page.apply(renderer.render([TextDeltaEvent(seq=2, content="** text")], None))
    assert "<strong>bold</strong>" in page.live()
    page.apply(renderer.render([TextEvent(seq=3, content="Some **bold** text"),
                                StatusEvent(seq=4, state="idle")], None))  # fmt: skip
    assert page.live() == ""


def test_a_catch_up_mid_stream_shows_the_block_as_markdown():
    class Conversation:
        last_seq = 2

    events = [TextDeltaEvent(seq=1, content="# Title\n\nSome "),
              TextDeltaEvent(seq=2, content="**bold** text")]  # fmt: skip
    page = Page()
    page.apply(render_catch_up(events, 0, Conversation()))
    assert "<h1>Title</h1>" in page.live() and "<strong>bold</strong>" in page.live()


def _html_text(text: str) -> str:
    """Text as the HTML parser reads it: CR LF and a lone CR are each one line feed."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


@pytest.mark.parametrize("cut", ["\r|\n", "|\r\n", "\r\n|"])
def test_crlf_split_between_frames_in_an_open_fence_is_one_line_break(cut):
    """Each frame's code is parsed by the browser on its own: a CR at the end of one frame
    and the LF at the start of the next would be two line breaks, the lines double-spaced
    until the block closes (and unlike what a catch-up shows)."""
    before, after = cut.split("|")
    chunks = ["```\n", f"a{before}", f"{after}b{before}", f"{after}c"]
    live = LiveMarkdown.of(chunks[0])
    live.html()
    shown = []
    for chunk in chunks[1:]:
        live.feed(chunk)
        shown.append(_html_text(unescape(live.frame().code)))
    assert "".join(shown) == "a\nb\nc"


LONG_BLOCKS = {
    "table": "| n | square |\n|---|---:|\n"
    + "".join(f"| {i} | **{i * i}** |\n" for i in range(1500)),
    "list": "".join(f"- item {i} with `code {i}`\n" for i in range(1500)),
    "lines": "".join(f"a line of a long paragraph, number {i}\n" for i in range(1500)),
    "cjk": "これは空白のない長い日本語の文章です。" * 1200,
}


@pytest.mark.parametrize("kind", sorted(LONG_BLOCKS))
def test_a_long_block_of_many_lines_or_no_spaces_costs_in_proportion_to_its_size(monkeypatch, kind):
    """The attack: one block of thousands of lines (a table, a list, a paragraph of short
    lines) or a line without spaces re-rendered whole as it grows, quadratic in its size.
    Every character handed to the renderer is counted over the whole stream: twice the
    text costs about twice as much, not four times."""
    rendered: list[int] = []
    for name in ("render_inline", "render_uncached"):
        real = getattr(live_module, name)
        counted = lambda t, real=real: rendered.append(len(t)) or real(t)  # noqa: E731
        monkeypatch.setattr(live_module, name, counted)

    def cost(text: str) -> int:
        rendered.clear()
        renderer = FragmentRenderer()
        for seq, at in enumerate(range(0, len(text), 40), start=1):
            renderer.render([TextDeltaEvent(seq=seq, content=text[at : at + 40])], None)
        return sum(rendered)

    text = LONG_BLOCKS[kind]
    assert len(text) > 20_000
    half, whole = cost(text[: len(text) // 2]), cost(text)
    assert whole <= 2.4 * half, (half, whole)
    assert whole <= 25 * len(text)  # a bounded factor (the open tail, redone per frame)


@pytest.mark.parametrize("kind", sorted(LONG_BLOCKS))
def test_long_blocks_build_what_a_catch_up_renders(kind):
    stream(LONG_BLOCKS[kind][:12_000], random.Random(kind), check_every=0.05)


def test_a_long_tables_newest_rows_show_as_table_rows_not_pipes():
    live = LiveMarkdown.of(LONG_BLOCKS["table"][:20_000])
    html = live.html()
    assert "| " not in re.sub(r"<[^>]+>", "", html.split('id="live-line"')[0])
    assert html.count("<tr>") > 400


def test_a_catch_up_never_names_a_live_block_the_page_may_not_have():
    """The page logs an out-of-band swap without its target as an error (it did after a
    Regenerate): the stale block's removal is the sync marker's word, acted on by the page
    only where the block is."""

    class Conversation:
        last_seq = 3

    events = [TextDeltaEvent(seq=1, content="Hel"), TextEvent(seq=2, content="Hello"),
              TextDeltaEvent(seq=3, content="Next")]  # fmt: skip
    done = render_catch_up(events[:2], 1, Conversation())  # the block the page had, done
    assert "data-drop-live" in done and "live-text" not in done
    streaming = render_catch_up(events, 2, Conversation())
    assert "data-drop-live" in streaming and "delete:" not in streaming
    page = Page(caught_up(1, "Hel"))
    page.apply(streaming)
    assert page.root.html().count('id="live-text"') == 1 and "Next" in page.live()
    quiet = render_catch_up(events[:2], 2, Conversation())  # nothing new: the block stays
    assert "data-drop-live" not in quiet
