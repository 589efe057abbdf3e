"""The chat page's scripts for panels not yet opened come when the user first reaches them
(static/harness.js, "scripts on demand"): none is fetched with the page, and each panel
works on its first click or key press all the same."""

from __future__ import annotations

import time

from tests.e2e.conftest import sign_in

ON_DEMAND = ("preview", "projects", "git_signins", "json_api", "uploads", "conversation_menu")
FETCHED = """names => performance.getEntriesByType('resource').map(e => e.name)
  .filter(n => names.some(name =>
    new RegExp('/static/' + name + '(\\\\.[0-9a-f]+)?\\\\.js').test(n)))"""


def fetched(page) -> list[str]:
    return page.evaluate(FETCHED, list(ON_DEMAND))


def test_panel_scripts_come_when_first_reached_and_work_on_the_first_try(new_context):
    page = sign_in(new_context(), "bob")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    assert fetched(page) == []
    # The Preview panel, by keyboard: opened, it looks for ports at once.
    page.focus("#preview-panel > summary")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.querySelector('#preview-status').textContent !== ''")
    assert len(fetched(page)) == 1
    # Git sign-ins, by a click: its list is drawn (there is none yet).
    page.click("#git-signins > summary")
    page.wait_for_selector("#signin-empty:visible")
    # The New project form, sent with Enter before anything else was touched in it: the
    # JSON API makes the project (no reload to the page's own URL).
    page.click("#new-project > summary")
    page.fill("#project-name", "on-demand")
    url = page.url
    page.press("#project-name", "Enter")
    page.wait_for_selector("#project-list .project-item .project-name >> text=on-demand")
    assert page.url == url
    assert sorted(fetched(page)) == sorted(set(fetched(page)))  # each fetched once


def test_a_click_before_the_script_has_run_is_not_lost(new_context):
    """A tool card's "show in the Preview panel" (outside the panel) is the first thing
    touched: the click is held until preview.js has run, then acted on."""
    page = sign_in(new_context(), "bob")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    held = []  # preview.js's request, answered once the click was seen held
    page.route("**/static/preview*.js", lambda route: held.append(route))
    page.evaluate("""() => {
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'link preview-show';
      button.dataset.port = '8123';
      button.textContent = 'show';
      document.querySelector('#messages').append(button);
    }""")
    page.click("#messages .preview-show")
    page.wait_for_selector("#preview-panel[data-loading]")
    deadline = time.monotonic() + 30
    while not held:  # (the route's handler runs while Playwright waits)
        assert time.monotonic() < deadline, "preview.js was never asked for"
        page.wait_for_timeout(20)
    assert not page.locator("#preview-panel").evaluate("el => el.open")  # held, not lost
    held[0].continue_()
    page.wait_for_selector("#preview-panel[open]")
    page.wait_for_function("() => document.querySelector('#preview-port').value === '8123'")


def test_a_checkbox_ticked_before_its_script_has_run_is_not_lost(new_context):
    """The ⋯ menu's notifications toggle, ticked while conversation_menu.js is on its way:
    the tick waits for the script, which then takes it (and asks for the permission)."""
    context = new_context()
    context.grant_permissions(["notifications"])
    page = sign_in(context, "bob")
    held = []
    page.route("**/static/conversation_menu*.js", lambda route: held.append(route))
    page.click(".conv-actions > summary")
    deadline = time.monotonic() + 30
    while not held:
        assert time.monotonic() < deadline, "conversation_menu.js was never asked for"
        page.wait_for_timeout(20)
    page.click("#notify-toggle")
    assert not page.is_checked("#notify-toggle")  # held, not lost
    held[0].continue_()
    page.wait_for_function("() => document.querySelector('#notify-toggle').checked")
    assert page.evaluate("localStorage.getItem('harness-notify')") == "on"
