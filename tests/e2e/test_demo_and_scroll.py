"""The offline demo model in the browser, and auto-scroll that pauses when scrolled up."""

from __future__ import annotations

import shutil

import pytest

from testkit.live import LiveServer
from testkit.model_server import text_reply
from tests.e2e.conftest import send, sign_in, wait_idle


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A second server with no API key: the offline demo model answers."""
    bash = "sandbox" if shutil.which("bwrap") else "off"
    server = LiveServer(tmp_path_factory.mktemp("demo"), HARNESS_BASH=bash)
    server.start()
    server.create_users("dana")
    yield server
    server.stop()


def test_offline_demo_model_works_end_to_end_in_the_browser(browser, demo):
    context = browser.new_context(base_url=demo.url)
    try:
        page = sign_in(context, "dana")
        assert "Offline demo model" in page.inner_text("#offline-banner")
        send(page, "write hello.py")
        wait_idle(page)
        card = page.locator("[data-part=tool]").last
        assert card.get_attribute("data-tool-name") == "write"
        assert card.get_attribute("data-tool-status") == "ok"
        send(page, "list files")
        wait_idle(page)
        assert "hello.py" in page.locator("[data-part=tool] .tool-result").last.inner_text()
        if shutil.which("bwrap"):
            send(page, "run python3 hello.py")
            wait_idle(page)
            result = page.locator("[data-part=tool] .tool-result").last.inner_text()
            assert "Hello from Harness" in result
    finally:
        context.close()


def test_auto_scroll_pauses_when_scrolled_up_and_offers_new_content(new_context, fresh_model):
    page = sign_in(new_context(viewport={"width": 1000, "height": 600}), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    long_answer = "\n\n".join(f"Paragraph {i} of a long answer." for i in range(60))
    fresh_model.enqueue(text_reply(long_answer))
    send(page, "long answer please")
    wait_idle(page)
    at_bottom = "() => { const m = document.querySelector('#messages');" \
                " return m.scrollHeight - m.scrollTop - m.clientHeight < 40; }"  # fmt: skip
    assert page.evaluate(at_bottom)  # followed the stream to the end
    fresh_model.enqueue(text_reply("more content arrives " * 200, delay=0.01))
    send(page, "more")  # sending jumps to the bottom; scrolling up while it streams pauses
    page.wait_for_selector("#live-text")
    page.evaluate("() => { const m = document.querySelector('#messages'); m.scrollTop = 0; "
                  "m.dispatchEvent(new Event('scroll')); }")  # fmt: skip
    page.wait_for_selector("#new-content:not([hidden])")
    wait_idle(page)
    assert not page.evaluate(at_bottom)  # it did not yank the view down
    page.click("#new-content")
    assert page.evaluate(at_bottom) and page.is_hidden("#new-content")
