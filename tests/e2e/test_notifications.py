"""Notices in a background tab (issue 15): a run that ends, or waits for an approval, while
the tab is hidden marks the tab's title until the tab is seen again, and shows a browser
notification when the user turned them on (a permission asked from the ⋯ menu's toggle).
A visible tab gets neither."""

from __future__ import annotations

from testkit.model_server import text_reply, tool_reply
from tests.e2e.conftest import send, sign_in, wait_idle
from tests.e2e.test_approval import asking

# Page visibility as a test controls it, and a Notification that records what it was given
# (headless Chromium shows none); the permission is granted by the context.
RECORDER = """
(() => {
  let hidden = false;
  Object.defineProperty(document, "hidden", { get: () => hidden, configurable: true });
  Object.defineProperty(document, "visibilityState",
    { get: () => (hidden ? "hidden" : "visible"), configurable: true });
  window.__setHidden = (value) => {
    hidden = value;
    document.dispatchEvent(new Event("visibilitychange"));
  };
  window.__notices = [];
  class RecordingNotification {
    static permission = "granted";
    static requestPermission() { return Promise.resolve("granted"); }
    constructor(title, options) { window.__notices.push({ title, body: options.body }); }
    close() {}
  }
  window.Notification = RecordingNotification;
})();
"""


def background_page(new_context):
    context = new_context()
    context.grant_permissions(["notifications"])
    context.add_init_script(RECORDER)
    page = sign_in(context, "alice")
    page.click(".conv-actions > summary")
    page.wait_for_selector(".conv-actions:not([data-loading])")  # its script (on demand)
    page.check("#notify-toggle")
    page.click(".conv-actions > summary")
    return page


def notices(page) -> list[dict]:
    return page.evaluate("window.__notices")


def test_a_run_that_ends_in_a_hidden_tab_marks_the_title_and_notifies(new_context, fresh_model):
    page = background_page(new_context)
    slow = text_reply("finished while you were away. " * 6)  # about a second
    slow.delay = 0.05
    fresh_model.enqueue(slow)
    send(page, "take your time")
    page.evaluate("window.__setHidden(true)")
    wait_idle(page)
    page.wait_for_function("document.title.startsWith('● Done — ')")
    assert notices(page) == [{"title": page.title().removeprefix("● Done — "),
                              "body": "The run finished."}]  # fmt: skip
    page.evaluate("window.__setHidden(false)")
    assert not page.title().startswith("●")
    # The choice is remembered: a reload keeps the toggle on.
    page.reload()
    page.click(".conv-actions > summary")  # (its script, on demand, sets the toggle)
    page.wait_for_function("() => document.querySelector('#notify-toggle').checked")


def test_an_approval_wait_in_a_hidden_tab_says_what_waits(new_context, fresh_model):
    fresh_model.enqueue(tool_reply(("write", {"path": "w.txt", "content": "x"})),
                        text_reply("done"))  # fmt: skip
    page = background_page(new_context)
    asking(page)
    page.evaluate("window.__setHidden(true)")
    send(page, "write it")
    page.wait_for_selector("#status[data-state=waiting_input]")
    page.wait_for_function("document.title.startsWith('⏸ Needs approval — ')")
    [notice] = notices(page)
    assert notice["body"].startswith("Approve write?") and "w.txt" in notice["body"]
    page.evaluate("window.__setHidden(false)")
    page.click("[data-part=approval] [data-decision=approve]")
    wait_idle(page)
    assert not page.title().startswith(("●", "⏸"))
    assert len(notices(page)) == 1  # the end came with the tab visible: nothing more


def test_a_visible_tab_gets_no_notice(new_context, fresh_model):
    page = background_page(new_context)
    fresh_model.enqueue(text_reply("here you are"))
    send(page, "quick one")
    wait_idle(page)
    assert notices(page) == [] and not page.title().startswith("●")


def test_without_the_users_leave_only_the_title_is_marked(new_context, fresh_model):
    context = new_context()
    context.add_init_script(RECORDER)
    page = sign_in(context, "alice")  # the toggle left off
    slow = text_reply("done quietly. " * 12)
    slow.delay = 0.05
    fresh_model.enqueue(slow)
    send(page, "go")
    page.evaluate("window.__setHidden(true)")
    wait_idle(page)
    page.wait_for_function("document.title.startsWith('● Done — ')")
    assert notices(page) == []
