"""Searching from the sidebar: Ctrl+K or / focuses the box, results show as you type, and
a result opens its conversation at that message; the search page lists every result."""

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


def test_the_search_page_shows_its_results_whole(new_context, fresh_model):
    """The page review: the search page's results were cut at 40% of the screen's height in
    a box of their own (the sidebar's), the last one mid-line."""
    page = sign_in(new_context(viewport={"width": 1440, "height": 700}), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    for n in range(8):
        send(page, f"the capybara census, part {n}")
        wait_idle(page)
    page.goto("/search?q=capybara")
    results = page.locator("main #search-results")
    assert results.locator(".search-hit").count() >= 8
    assert results.evaluate("el => el.scrollHeight <= el.clientHeight")  # nothing hidden inside


def test_a_hit_in_this_conversation_closes_the_phone_drawer(new_context, fresh_model):
    """The demanding-user pass: on a phone, a hit in the conversation already open only
    changed the address's #seq-<n>, and the conversations drawer it was in stayed over the
    part it had scrolled to."""
    page = sign_in(new_context(viewport={"width": 390, "height": 844}, has_touch=True), "bob")
    page.click("#menu-toggle")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "the pangolin inventory")
    wait_idle(page)
    for _ in range(4):
        send(page, "filler " * 60)
        wait_idle(page)
    page.click("#menu-toggle")
    page.fill("#search", "pangolin")
    page.locator(".search-hit", has_text="pangolin").first.click()
    found = page.wait_for_selector("#messages > .part.found")
    page.wait_for_function("() => !document.body.classList.contains('sidebar-open')")
    page.wait_for_function(  # in sight, not under the drawer (once it has slid away)
        "el => { const r = el.getBoundingClientRect(); const hit = document.elementFromPoint("
        "r.left + r.width / 2, r.top + r.height / 2); return el.contains(hit); }",
        arg=found,
    )
