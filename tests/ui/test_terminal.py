"""The live terminal of a CLI agent as HTML: colours become spans with our
own classes; everything else in the pane, hostile or not, is text."""

from __future__ import annotations

from agent.ui.terminal import ansi_to_html, terminal_fragment
from tests.xss_corpus import xss_payloads


def test_colours_and_bold_become_classed_spans_and_other_sequences_vanish():
    screen = (
        "\x1b[1;31mfailed\x1b[0m plain \x1b]0;window title\x07\x1b[?25h\x1b[2J\x1b[92mok\x1b[39m."
    )
    assert ansi_to_html(screen) == (
        '<span class="t-bold t-red">failed</span> plain <span class="t-bright-green">ok</span>.'
    )


def test_hostile_pane_text_stays_text():
    for payload in xss_payloads():
        for screen in (payload, f"\x1b[31m{payload}\x1b[0m", f"\x1b]8;;{payload}\x07link"):
            rendered = ansi_to_html(screen)
            tags = rendered.replace('<span class="t-red">', "").replace("</span>", "")
            assert "<" not in tags, screen


def test_an_escape_cannot_smuggle_attributes_into_a_span():
    rendered = ansi_to_html('\x1b[31;4" onmouseover="alert(1)m\x1b[31m" onclick="x\x1b[0m')
    # The broken sequence is text; the one span carries only our class.
    assert rendered.count("<span") == 1 and '<span class="t-red">" onclick' in rendered


def test_the_fragment_is_one_element_that_pushes_replace(settings):
    html = terminal_fragment("\x1b[32mready\x1b[0m", oob=True)
    assert html.startswith('<pre id="terminal"') and 'hx-swap-oob="true"' in html
    assert '<span class="t-green">ready</span>' in html
