"""The status line as a person sees it: "Writing…" while the answer streams, a cancelled
prompt stopped (neutral, not a red error), and the last error gone once a new prompt runs."""

from __future__ import annotations

import re
import threading

from testkit.model_server import HttpError, text_reply
from tests.e2e.conftest import send, sign_in, wait_idle


def test_writing_then_stopped_then_cleared_by_the_next_prompt(new_context, fresh_model):
    fresh_model.enqueue(text_reply("streaming " * 300, hold=threading.Event()))
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


def test_a_stale_error_clears_when_the_next_prompt_is_accepted_before_its_run_reports(
    new_context, fresh_model
):
    """The page clears the last prompt's error itself as soon as the server accepts the
    next one (static/harness.js, clearStaleError), not when the run's first status comes.
    To see the difference, the socket's run frames are held back in the browser's network
    (Playwright routes the WebSocket) while the prompt's answer goes through."""
    held: list[str] = []
    hold = {"on": False}
    routes = []

    def route(ws):
        server = ws.connect_to_server()
        routes.append(ws)

        def from_page(message):
            server.send(message)

        def from_server(message):
            text = message if isinstance(message, str) else message.decode()
            if hold["on"] and text.startswith('<div id="sync-state"'):
                held.append(text)  # a batch of the run: later
            else:
                ws.send(message)  # the prompt's answer (#composer-alert) and the rest

        ws.on_message(from_page)
        server.on_message(from_server)

    context = new_context()
    page = sign_in(context, "alice")
    page.click(".new-conv")
    page.route_web_socket(re.compile(r"/ws/c/"), route)
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    assert routes, "the socket was not routed"

    fresh_model.enqueue(HttpError(400, "invalid_request_error", "The request was refused"))
    send(page, "fail, please")
    page.wait_for_function("() => document.querySelector('#status').dataset.state === 'error'")
    assert "refused" in page.inner_text("#status")

    hold["on"] = True
    fresh_model.enqueue(text_reply("fine now"))
    page.fill("#prompt", "again")
    page.press("#prompt", "Enter")
    # The prompt's answer: accepted, so the page empties the box.
    page.wait_for_function("() => document.querySelector('#prompt').value === ''")
    # Accepted, and the run's frames (its user part, its first status) not yet shown: the
    # status line has already let go of the old error.
    for _ in range(100):  # until the run's first frame has come (and been held back)
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "no run frame came"
    assert page.locator("#messages [data-part=user]").count() == 1
    assert page.get_attribute("#status", "data-state") != "error"
    assert "refused" not in page.inner_text("#status")

    hold["on"] = False
    for message in held:
        routes[-1].send(message)
    wait_idle(page)
    assert page.locator("#messages [data-part=user]").count() == 2
    assert page.inner_text("#status").strip() == ""
