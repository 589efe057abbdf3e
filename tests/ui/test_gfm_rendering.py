"""What Claude writes renders as on GitHub (the cases of the issue, autolinks as cmark-gfm
finds them), and what the policy shows instead of images, checkboxes and footnote links."""

from __future__ import annotations

import re
import time

import pytest

from agent.ui.markdown import MAX_MARKDOWN, render_markdown, render_uncached

REL = 'rel="noopener noreferrer nofollow" target="_blank"'


def link(href: str, text: str) -> str:
    return f'<a href="{href}" {REL}>{text}</a>'


def test_a_list_right_under_a_line_of_text_is_a_list():
    html = render_uncached("Things to check:\n- one\n- two")
    assert html == "<p>Things to check:</p>\n<ul>\n<li>one</li>\n<li>two</li>\n</ul>"


@pytest.mark.parametrize("indent", [2, 3, 4])
def test_nested_lists_indented_by_two_to_four_spaces_nest(indent):
    html = render_uncached(f"- a\n{' ' * indent}- b\n- c")
    assert html == "<ul>\n<li>a\n<ul>\n<li>b</li>\n</ul>\n</li>\n<li>c</li>\n</ul>"


def test_strikethrough_with_one_or_two_tildes():
    assert render_uncached("~~gone~~ and ~this~") == "<p><del>gone</del> and <del>this</del></p>"


def test_task_list_items_show_a_box_character_and_no_form_control():
    html = render_uncached("- [ ] todo\n- [x] done\n  - [X] nested")
    assert "<input" not in html and "checkbox" not in html
    assert "<li>☐ todo</li>" in html and "<li>☑ done\n<ul>\n<li>☑ nested</li>" in html
    # In a loose list the box starts the item's paragraph, as GitHub places it.
    assert "<li>\n<p>☐ loose</p>" in render_uncached("- [ ] loose\n\n  more")


def test_raw_input_elements_never_survive():
    html = render_uncached('<input type="checkbox" checked disabled> x <input name=p>')
    assert "<input" not in html


def test_ordered_lists_keep_their_start():
    assert render_uncached("3. c\n4. d").startswith('<ol start="3">')


def test_tables_align_with_the_align_attribute_not_a_style():
    html = render_uncached("| a | b | c |\n|:--|:-:|--:|\n| 1 | 2 | 3 |")
    assert '<th align="left">a</th>' in html and '<td align="center">2</td>' in html
    assert '<td align="right">3</td>' in html and "style" not in html


def test_code_with_a_known_language_is_highlighted_and_any_other_is_plain():
    python = render_uncached("```python\nx = 1  # c\n```")
    assert python.startswith('<div class="codehilite"><pre><code><span class="n">x</span>')
    assert '<span class="c1"># c</span>' in python
    assert render_uncached("```nosuchlanguage\n<b>x</b>\n```") == (
        '<div class="codehilite"><pre><code>&lt;b&gt;x&lt;/b&gt;\n</code></pre></div>'
    )
    assert render_uncached("    indented\n") == (
        '<div class="codehilite"><pre><code>indented\n</code></pre></div>'
    )


def test_highlighting_keeps_leading_and_trailing_blank_lines():
    html = render_uncached("```python\n\nx\n\n```")
    assert html.endswith('<code>\n<span class="n">x</span>\n\n</code></pre></div>')


def test_an_image_is_its_alt_text():
    html = render_uncached("see ![the *diagram*](https://evil.example/leak?d=secret)")
    assert html == "<p>see the diagram</p>"


def test_footnotes_are_numbers_and_a_list_without_in_page_links():
    html = render_uncached("A claim.[^1] Another.[^x]\n\n[^1]: Source one.\n[^x]: Source two.")
    assert html == (
        "<p>A claim.<sup>1</sup> Another.<sup>2</sup></p>\n<hr>\n<ol>\n"
        "<li><p>Source one.</p>\n</li>\n<li><p>Source two.</p>\n</li>\n</ol>"
    )


def test_an_alert_is_a_blockquote_led_by_its_kind():
    html = render_uncached("> [!WARNING]\n> Mind the gap.")
    assert html == (
        "<blockquote>\n<p><strong>Warning</strong></p>\n<p>Mind the gap.</p>\n</blockquote>"
    )


# Each case: markdown, then the paragraph expected, with <<href|text>> for each link.
AUTOLINKS = [
    ("see www.example.com/a.", "see <<http://www.example.com/a|www.example.com/a>>."),
    ('"https://example.com"', '"<<https://example.com|https://example.com>>"'),
    ("(https://x.org/a_(b))", "(<<https://x.org/a_(b)|https://x.org/a_(b)>>)"),
    ("HTTPS://X.ORG", "<<HTTPS://X.ORG|HTTPS://X.ORG>>"),
    ("http://localhost:8000/x", "<<http://localhost:8000/x|http://localhost:8000/x>>"),
    ("https://x.org/?a=1&b=2", "<<https://x.org/?a=1&amp;b=2|https://x.org/?a=1&amp;b=2>>"),
    ("https://x.org/&hl; after", "<<https://x.org/|https://x.org/>>&amp;hl; after"),
    ("mail first_last@corp.example.com.", "mail <<mailto:first_last@corp.example.com|"
     "first_last@corp.example.com>>."),
    ("mailto:a@b.io", "<<mailto:a@b.io|mailto:a@b.io>>"),
    ("*www.example.com*", "<em><<http://www.example.com|www.example.com>></em>"),
    ("`https://in.code`", "<code>https://in.code</code>"),
    ("[text https://x.org](https://y.org)", "<<https://y.org|text https://x.org>>"),
    ("xhttp://a.com xwww.a.com x@y www.a_b.com", "xhttp://a.com xwww.a.com x@y www.a_b.com"),
    ("ftp://files.example.com", "ftp://files.example.com"),
    ("app.py, README.md, example.com", "app.py, README.md, example.com"),
]  # fmt: skip


@pytest.mark.parametrize(("markdown", "expected"), AUTOLINKS)
def test_bare_urls_and_addresses_link_as_on_github(markdown, expected):
    html = re.sub(r"<<([^|]*)\|([^>]*)>>", lambda m: link(m.group(1), m.group(2)), expected)
    assert render_uncached(markdown) == f"<p>{html}</p>"


def test_hrefs_are_percent_encoded_as_github_writes_them():
    assert 'href="http://%F0%9F%8D%84.ga/"' in render_uncached("http://🍄.ga/")


def test_only_links_that_keep_their_href_get_rel_and_target():
    html = render_uncached(
        '<a title="x&quot; href=&quot;y" href="/relative">r</a> '
        '<a href="https://ok.example" title="a > b">k</a> <a rel="opener" target="_top">n</a>'
    )
    assert html.count("noopener") == 1 and 'opener"' not in html and "_top" not in html
    assert f'<a href="https://ok.example" title="a &gt; b" {REL}>k</a>' in html


def test_beyond_the_limit_text_is_shown_escaped():
    text = "<b>x</b> *y* " * (MAX_MARKDOWN // 10)
    html = render_markdown(text)
    assert html.startswith("<pre>&lt;b&gt;x&lt;/b&gt; *y* ") and "<b>" not in html


@pytest.mark.parametrize(
    "text",
    [
        "www.a.com/" + ")" * 100_000,  # each trailing ')' recounted the parentheses
        "a" * 100_000 + " ://x.com",  # the scheme looked for in all the pending text
        ("local_part" * 10 + "@") * 1_000 + "x.com",
    ],
    ids=["parentheses", "scheme", "addresses"],
)
def test_autolinking_untrusted_text_takes_linear_time(text):
    started = time.thread_time()
    render_uncached(text)
    assert time.thread_time() - started < 2.0  # quadratic scans took 12 s and 134 s here
