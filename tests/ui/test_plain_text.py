"""The plain-text shortcut of the markdown seam (agent/ui/markdown.py): text with no
markdown in it is returned as it is, without the parser; for every such text that must be
exactly what the whole pass (markdown-it, then the sanitizer) gives."""

from __future__ import annotations

import random

from agent.ui import gfm
from agent.ui.markdown import _plain, render_inline, render_uncached, sanitize
from tests.ui.test_gfm_conformance import examples

# Letters and marks of several scripts, digits, the punctuation prose uses, and now and
# then one of markdown's marks, so both sides of the shortcut are drawn.
ALPHABET = "abcxyzABCXYZ0123456789      .,;:'\"?()/%+=#$-|^{}éßÆøñ日本語Привет😀\u0301\u200b\u3000"
MARKS = "*_[]!<>&@\\`~\t\r\n\x00\xa0\u2028"


def _texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    found = []
    for _ in range(count):
        size = rng.randint(0, 40)
        chars = [rng.choice(ALPHABET) for _ in range(size)]
        if chars and rng.random() < 0.2:
            chars[rng.randrange(len(chars))] = rng.choice(MARKS)
        text = "".join(chars)
        if rng.random() < 0.1:
            text = rng.choice(["www.", "http://", "https://", "a@b.", "mailto:"]) + text
        found.append(text)
    return found


def _whole_inline(text: str) -> str:
    return sanitize(gfm.render_inline(text))


def _whole_block(text: str) -> str:
    return sanitize(gfm.render(text)).strip()


def test_plain_text_renders_as_the_whole_pass_renders_it():
    plain = 0
    for text in _texts(4000, seed=20261125):
        assert render_inline(text) == _whole_inline(text), repr(text)
        assert render_uncached(text) == _whole_block(text), repr(text)
        plain += _plain(text)
    assert 2000 < plain < 4000  # both sides drawn


def test_the_lines_of_the_gfm_spec_examples_render_as_the_whole_pass_renders_them():
    for example in examples("conformance", "markdown", "gfm-spec.txt"):
        for text in [example.markdown, *example.markdown.splitlines()]:
            assert render_inline(text) == _whole_inline(text), repr(text)
            assert render_uncached(text) == _whole_block(text), repr(text)


def test_what_the_shortcut_passes_over_is_still_markdown():
    assert render_inline("12:1764101234 13:1764101235") == "12:1764101234 13:1764101235"
    assert render_uncached("It's 5 o'clock, \"ok\"?  ") == "<p>It's 5 o'clock, \"ok\"?</p>"
    assert render_inline("a *b* c") == "a <em>b</em> c"
    assert "<a " in render_inline("see www.example.com now")
    assert render_uncached("1. one") == "<ol>\n<li>one</li>\n</ol>"
    assert render_uncached("# Title") == "<h1>Title</h1>"
    assert render_uncached("    code").startswith('<div class="codehilite">')
    assert "<script" not in render_inline("x <script>alert(1)</script>")
    # the sanitizer drops a byte order mark; a lone surrogate cannot be encoded at all
    assert render_inline("\ufeffabc") == _whole_inline("\ufeffabc")
    assert not _plain("\ud800abc")
