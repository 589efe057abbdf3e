"""The sanitizing seam: markdown support, and nothing dangerous survives any payload."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from agent.ui.markdown import ALLOWED_TAGS, render_markdown, url_scheme
from tests.xss_corpus import xss_payloads

SAFE_ATTRIBUTES = {"href", "title", "class", "align", "start", "rel", "target"}


class Audit(HTMLParser):
    def __init__(self):
        super().__init__()
        self.problems: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in ALLOWED_TAGS:
            self.problems.append(f"tag <{tag}>")
        for name, value in attrs:
            if name not in SAFE_ATTRIBUTES:
                self.problems.append(f"attribute {name} on <{tag}>")
            if name == "href":
                scheme = url_scheme(value or "")
                if scheme is not None and scheme not in ("http", "https", "mailto"):
                    self.problems.append(f"href {value!r}")
            if name == "class" and "hx-" in (value or ""):
                self.problems.append("htmx class")


def audit(html: str) -> list[str]:
    parser = Audit()
    parser.feed(html)
    parser.close()
    return parser.problems


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("**bold**", "<strong>bold</strong>"),
        ("*italic*", "<em>italic</em>"),
        ("`code`", "<code>code</code>"),
        ("- item\n- two", "<li>item</li>"),
        ("1. item\n2. two", "<ol>"),
        ("[link](https://example.com)", 'href="https://example.com"'),
        ("# Heading", "<h1>Heading</h1>"),
        ("**bold *italic***", "<strong>bold <em>italic</em></strong>"),
        ("```python\nx = 1\n```", '<div class="codehilite"><pre>'),
        ("| a | b |\n|---|---|\n| 1 | 2 |", "<table>"),
        ("```\na -> b\n```", "a -&gt; b"),
    ],
)
def test_markdown_support_matrix(markdown, expected):
    assert expected in render_markdown(markdown)


def test_links_get_rel_noopener_and_unsafe_schemes_lose_href():
    html = render_markdown("[a](https://x.com) [b](javascript:alert(1)) [c](data:text/html,x)")
    assert html.count('rel="noopener noreferrer nofollow"') == 1
    assert "javascript" not in html and "data:" not in html


@pytest.mark.parametrize(
    ("url", "scheme"),
    [("javascript:123", "javascript"), (" java\tscript:x", "javascript"), ("\x01JAVASCRIPT:x",
      "javascript"), ("https://x", "https"), ("/relative", None), ("<iframe src=x>", None)],
)  # fmt: skip
def test_url_scheme_is_read_the_way_browsers_read_it(url, scheme):
    assert url_scheme(url) == scheme


def test_javascript_href_with_digits_only_is_stripped():
    assert render_markdown('<a href="javascript:123">x</a>') == "<p><a>x</a></p>"


def test_file_names_are_not_autolinked_but_urls_are():
    html = render_markdown("Edit app.py and README.md, see https://example.com/a?b=1.")
    assert html.count("<a ") == 1 and 'href="https://example.com/a?b=1"' in html


def test_images_never_render_even_from_markdown():
    assert "<img" not in render_markdown("![x](https://evil.example/leak?d=secret)")


def test_raw_html_with_htmx_and_ids_is_stripped():
    html = render_markdown('<div id="status" hx-get="/x" data-hx-post="/y" ws-send>z</div>')
    assert html == "<div>z</div>"


def test_every_xss_corpus_payload_comes_out_inert():
    payloads = xss_payloads()
    assert len(payloads) > 1500
    failures = {}
    for payload in payloads:
        for text in (payload, f"text before\n\n{payload}\n\nafter", f"[x]({payload})"):
            problems = audit(render_markdown(text))
            if problems:
                failures[payload] = problems
    assert failures == {}
