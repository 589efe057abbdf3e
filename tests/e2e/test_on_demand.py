"""The chat page's scripts for panels not yet opened come when the user first reaches them
(static/harness.js, "scripts on demand"): none is fetched with the page, and each panel
works on its first click or key press all the same."""

from __future__ import annotations

from tests.e2e.conftest import sign_in, wait_until_asked
from tests.e2e.test_notifications import RECORDER

ON_DEMAND = ("preview", "projects", "git_signins", "json_api", "uploads", "conversation_menu")
FETCHED = """names => performance.getEntriesByType('resource').map(e => e.name)
  .filter(n => names.some(name =>
    new RegExp('/static/' + name + '(\\\\.[0-9a-f]+)?\\\\.js').test(n)))"""
# What the ⋯ menu's panel says above its controls (while its script loads, or failed).
MENU_NOTE = """() => getComputedStyle(document.querySelector('.conv-actions > .menu-panel'),
  '::before').content"""


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
    wait_until_asked(page, held, "preview.js")
    assert not page.locator("#preview-panel").evaluate("el => el.open")  # held, not lost
    held[0].continue_()
    page.wait_for_selector("#preview-panel[open]")
    page.wait_for_function("() => document.querySelector('#preview-port').value === '8123'")


def test_a_checkbox_ticked_before_its_script_has_run_is_not_lost(new_context):
    """The ⋯ menu's notifications toggle, ticked while conversation_menu.js is on its way:
    the tick waits for the script, which then takes it (and asks for the permission)."""
    context = new_context()
    context.grant_permissions(["notifications"])
    context.add_init_script(RECORDER)  # (the headless shell has no notifications)
    page = sign_in(context, "bob")
    held = []
    page.route("**/static/conversation_menu*.js", lambda route: held.append(route))
    toggle = page.locator(".conv-actions > summary")
    before = toggle.bounding_box()
    toggle.click()
    wait_until_asked(page, held, "conversation_menu.js")
    # Said atop the open menu, not beside its toggle, which stays under the pointer.
    assert page.evaluate(MENU_NOTE) == '"Loading…"'
    assert toggle.bounding_box() == before
    page.click("#notify-toggle")
    assert not page.is_checked("#notify-toggle")  # held, not lost
    held[0].continue_()
    page.wait_for_function("() => document.querySelector('#notify-toggle').checked")
    assert page.evaluate("localStorage.getItem('harness-notify')") == "on"


def test_a_script_that_does_not_come_lets_the_rest_work_and_is_fetched_again(new_context):
    """conversation_menu.js and uploads.js refused (a flaky network; a deploy that replaced
    them): the menu says so and its plain forms still work, an upload is refused with the
    reason, and the next reach fetches each again."""
    page = sign_in(new_context(), "bob")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    for script in ("conversation_menu", "uploads"):
        page.route(f"**/static/{script}*.js", lambda route: route.abort())
    page.fill("#prompt", "kept")
    page.set_input_files("#attach-input", files=[
        {"name": "a.txt", "mimeType": "text/plain", "buffer": b"a"}])  # fmt: skip
    page.wait_for_selector("#composer-alert[data-code=upload]:visible")
    assert page.input_value("#prompt") == "kept"
    toggle = page.locator(".conv-actions > summary")
    before = toggle.bounding_box()
    toggle.click()
    page.wait_for_selector(".conv-actions[data-load-failed]")
    assert toggle.bounding_box() == before
    assert page.evaluate(MENU_NOTE) == '"Could not load: try again"'
    page.click("#instructions-open")  # its script missing: nothing opens, nothing breaks
    assert not page.locator("#instructions-dialog").evaluate("d => d.open")
    # Back on the network: each comes when next reached, on this same page.
    page.unroute_all()
    page.click("#instructions-open")
    page.wait_for_selector("#instructions-dialog[open]")
    page.click("#instructions-cancel")
    page.set_input_files("#attach-input", files=[
        {"name": "b.txt", "mimeType": "text/plain", "buffer": b"b"}])  # fmt: skip
    page.wait_for_function(
        "() => document.querySelector('#prompt').value.includes('uploads/b.txt')"
    )
    # A plain form of the menu, its script refused on a new page: Fork still goes.
    page.route("**/static/conversation_menu*.js", lambda route: route.abort())
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    page.click(".conv-actions > summary")
    url = page.url
    page.click("#fork-form button")
    page.wait_for_url(lambda new: new != url)
    assert errors == []
