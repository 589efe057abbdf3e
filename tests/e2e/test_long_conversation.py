"""A long conversation opens at its latest parts; scrolling up loads the earlier ones above,
the reader kept where they were; a search link to an early message loads back to it."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import sign_in

PAGE = 120  # agent/ui/paging.PAGE
READER = "lorna"


@pytest.fixture(scope="module")
def long(live):
    live.create_users(READER)  # of their own: other tests' users keep their newest conversation
    code = ("import json\nfrom bench import fixtures\n"
            f"print(json.dumps(fixtures.long_conversation(1000, '{READER}')))")  # fmt: skip
    return json.loads(live.manage("shell", "-c", code).strip().splitlines()[-1])


def shown(page) -> list[int]:
    return page.eval_on_selector_all("#messages > [data-part]",
                                     "els => els.map(e => +e.dataset.seq)")  # fmt: skip


def test_scrolling_up_loads_the_earlier_parts_in_place(new_context, long):
    page = sign_in(new_context(), READER)
    page.goto(f"/c/{long['conversation']}/")
    page.wait_for_selector("body[data-ws=open]")
    first = shown(page)
    assert len(first) == PAGE and first[-1] <= long["events"]
    assert page.get_attribute("#earlier", "data-before") == str(first[0])
    top = f"#messages > [data-seq='{first[0]}']"
    page.eval_on_selector("#messages", "m => { m.scrollTop = 0; }")
    page.wait_for_function("n => document.querySelectorAll('#messages > [data-part]').length > n",
                           arg=PAGE)  # fmt: skip
    more = shown(page)
    assert more == sorted(more) and more[-PAGE:] == first and more[0] < first[0]
    # Put above the reader, not under them: what was at the top is still in view, and the
    # page does not call it new content.
    assert page.eval_on_selector(top, "el => { const r = el.getBoundingClientRect(), m = "
                                 "document.querySelector('#messages').getBoundingClientRect();"
                                 " return r.bottom > m.top && r.top < m.bottom; }")  # fmt: skip
    assert page.is_hidden("#new-content")
    # Their times came with them (taken in, not left in the transcript): on hover, as any.
    assert page.locator("#messages .part-times").count() == 0
    titles = page.eval_on_selector_all(
        "#messages > [data-part=tool]", "els => els.map(e => [+e.dataset.seq, e.title])"
    )
    assert all(title for seq, title in titles if seq < first[0])


def test_a_link_to_an_early_message_loads_back_to_it(new_context, long):
    page = sign_in(new_context(), READER)
    page.goto("/search?q=module")  # from another page, as a search hit is followed
    page.goto(f"/c/{long['conversation']}/#seq-1")
    found = page.wait_for_selector("#messages > .part.found")
    assert found.get_attribute("data-seq") == "1"
    assert shown(page)[0] == 1


def test_a_link_within_the_page_loads_back_to_it_too(new_context, long):
    page = sign_in(new_context(), READER)
    page.goto(f"/c/{long['conversation']}/")
    page.wait_for_selector("body[data-ws=open]")
    page.evaluate("() => { location.hash = '#seq-7'; }")
    found = page.wait_for_selector("#messages > .part.found")
    assert found.get_attribute("data-seq") == "7"
