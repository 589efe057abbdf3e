"""A search snippet on the page reads as the answer shows: markdown's marks left out, the
text escaped and its matches marked (the first-use review saw raw markdown)."""

from __future__ import annotations

from agent.runs.search import START, STOP, Found


def test_a_snippet_on_the_page_leaves_out_markdowns_marks_and_stays_escaped():
    raw = ("## Plan\n- Use **bold** and `code`, *it* and [the docs](https://x.y/z) "
           f"{START}word{STOP} 2*3 <b>&</b>")  # fmt: skip
    found = Found("c", 1, raw, "t")
    assert str(found.marked) == (
        "Plan\nUse bold and code, it and the docs <mark>word</mark> 2*3 &lt;b&gt;&amp;&lt;/b&gt;"
    )
    # The API's snippet is the text as stored (its matches unmarked).
    assert found.plain()["snippet"] == raw.replace(START, "").replace(STOP, "")
