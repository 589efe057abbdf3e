"""Searching from the sidebar: Ctrl+K or / focuses the box, results show as you type, and
a result opens its conversation at that message."""

from __future__ import annotations

from tests.e2e.conftest import send, sign_in, wait_idle


def test_search_from_the_sidebar_opens_the_conversation_at_the_message(new_context, fresh_model):
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "remember the okapi migration plan")
    wait_idle(page)
    for _ in range(6):  # enough below it that opening at the message has to scroll
        send(page, "filler " * 60)
        wait_idle(page)
    page.click(".new-conv")  # somewhere else
    page.wait_for_selector("body[data-ws=open]")
    page.locator("body").press("Control+k")
    assert page.evaluate("() => document.activeElement.id") == "search"
    page.keyboard.type("okapi")
    hit = page.wait_for_selector(".search-hit >> nth=0")
    assert hit.query_selector("mark").inner_text().lower() == "okapi"
    hit.click()
    found = page.wait_for_selector("#messages > .part.found")
    assert "okapi" in found.inner_text()
    assert found.is_visible() and page.evaluate(
        "el => { const r = el.getBoundingClientRect(), m = document.querySelector('#messages')"
        ".getBoundingClientRect(); return r.top >= m.top && r.top < m.bottom; }",
        found,
    )  # scrolled to, not left at the bottom
    page.locator("#messages").focus()
    page.keyboard.press("/")
    assert page.evaluate("() => document.activeElement.id") == "search"
