"""Compacting the context from the page: the ⋯ menu's button, the divider with its summary,
and the meter's gauge of how full the context is."""

from __future__ import annotations

from testkit.model_server import message_reply
from tests.e2e.conftest import send, sign_in, wait_idle


def test_compact_from_the_menu_shows_the_summary_and_the_gauge(new_context, fresh_model):
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    for step in ("first step", "second step", "third step"):
        send(page, step)
        wait_idle(page)
    assert "context" in page.inner_text("#context-gauge")  # usage reported the window
    fresh_model.enqueue(message_reply("The user walked through **three steps**."))
    page.click(".conv-actions summary")
    page.click(".compact-form button")
    divider = page.wait_for_selector("[data-part=compaction]")
    wait_idle(page)
    assert not page.is_visible(".compact-form")  # the menu closed, off the transcript
    assert "Context compacted" in divider.inner_text()
    divider.query_selector("summary").click()
    assert divider.query_selector(".md strong").inner_text() == "three steps"
    page.reload()
    page.wait_for_selector("[data-part=compaction] >> text=Context compacted")
    kinds = [p.get_attribute("data-part") for p in page.query_selector_all("#messages > .part")]
    assert kinds[-1] == "compaction" and kinds.count("user") == 3  # the transcript keeps all


def test_nothing_to_compact_is_a_notice_not_an_error(new_context, fresh_model):
    """The demanding-user pass: Compact context on a short conversation said "Notice" in an
    error's red box; the transcript's other notices (a limit, not a failure) are amber."""
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    page.click(".conv-actions summary")
    page.click(".compact-form button")
    notice = page.wait_for_selector("[data-part=error][data-code=nothing_to_compact]")
    assert notice.query_selector(".error-label").inner_text() == "Notice"
    colours = "el => [getComputedStyle(el).color, getComputedStyle(el).backgroundColor]"
    error = page.evaluate(
        "() => { const el = document.createElement('div'); el.className = 'part error';"
        " document.querySelector('#messages').append(el); const s = getComputedStyle(el);"
        " const c = [s.color, s.backgroundColor]; el.remove(); return c; }"
    )
    assert notice.evaluate(colours) != error
    # A notice of the moment: not kept in the conversation (it stayed there for good, and
    # came back with every reload), and the page's sequence goes on past it.
    wait_idle(page, prompted=False)
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    assert page.locator("#messages [data-part=error]").count() == 0
    send(page, "still here")
    wait_idle(page)
    page.reload()
    page.wait_for_selector("#messages [data-part=user] >> text=still here")
    assert page.locator("#messages [data-part=error]").count() == 0
