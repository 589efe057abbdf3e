"""The status line as a person sees it: "Writing…" while the answer streams, a cancelled
prompt stopped (neutral, not a red error), and the last error gone once a new prompt runs."""

from __future__ import annotations

from testkit.model_server import text_reply
from tests.e2e.conftest import send, sign_in, wait_idle


def test_writing_then_stopped_then_cleared_by_the_next_prompt(new_context, fresh_model):
    fresh_model.enqueue(text_reply("streaming " * 300, delay=0.02))
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "talk for a long time")
    page.wait_for_selector("#live-text")
    page.wait_for_function("() => document.querySelector('#status').innerText.includes('Writing')")
    assert "Thinking" not in page.inner_text("#status")
    page.click("#cancel")
    page.wait_for_function("() => document.querySelector('#status').dataset.state === 'error'")
    assert page.inner_text("#status").startswith("Stopped")
    stopped = page.locator("[data-part=error]").last
    assert "Stopped" in stopped.inner_text() and "Error" not in stopped.inner_text()
    assert stopped.evaluate("(el) => getComputedStyle(el).backgroundColor") in (
        "rgba(0, 0, 0, 0)",
        "transparent",
    )
    # The next prompt: the stopped line goes as soon as it is accepted.
    fresh_model.enqueue(text_reply("back to normal", delay=0.3))
    send(page, "again")
    page.wait_for_function("() => document.querySelector('#status').dataset.state !== 'error'")
    assert "Stopped" not in page.inner_text("#status")
    wait_idle(page)
    assert page.inner_text("#status").strip() == ""
