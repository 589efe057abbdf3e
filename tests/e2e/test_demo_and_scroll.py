"""The offline demo model in the browser, and auto-scroll that pauses when scrolled up."""

from __future__ import annotations

import shutil

import pytest

from testkit.live import LiveServer
from testkit.model_server import text_reply
from tests.cli_agents import install_cli_agents
from tests.e2e.conftest import send, sign_in, wait_idle


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A second server with no API key: the offline demo model answers. Claude Code is
    installed (it needs a real model, so it must not be offered)."""
    bash = "sandbox" if shutil.which("bwrap") else "off"
    claude = install_cli_agents()["claude-code"]
    server = LiveServer(tmp_path_factory.mktemp("demo"), HARNESS_BASH=bash,
                        HARNESS_AGENT_CLAUDE_CODE_COMMAND=claude)  # fmt: skip
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


@pytest.mark.skipif(not shutil.which("bwrap"), reason="the demo's run needs a bash sandbox")
def test_after_stop_the_demo_answers_the_new_prompt(browser, demo):
    """The first-use review: "list files" after stopping "run sleep 10" was answered with
    "`bash` reported an error: cancelled…"."""
    context = browser.new_context(base_url=demo.url)
    try:
        page = sign_in(context, "dana")
        page.click(".new-conv")
        page.wait_for_selector("body[data-ws=open]")
        send(page, "run sleep 10")
        page.wait_for_selector("[data-part=tool][data-tool-name=bash][data-tool-status=running]")
        page.click("#cancel")
        page.wait_for_function("() => document.querySelector('#status').dataset.state === 'error'")
        assert "while it ran" in page.inner_text("[data-tool-name=bash] .tool-result")
        send(page, "list files")
        wait_idle(page)
        assert page.locator("[data-part=tool]").last.get_attribute("data-tool-name") == "list_dir"
        answer = page.locator("[data-part=text]").last.inner_text()
        assert "list_dir" in answer and "cancelled" not in answer
    finally:
        context.close()


def test_without_a_model_key_no_cli_agent_is_offered_and_one_is_refused_at_once(browser, demo):
    """Claude Code retried the gateway's refusal for minutes, holding a run slot: a CLI
    conversation from before is refused at once with one sentence, the text kept."""
    code = (
        "from agent.models import Conversation, User; print(Conversation.objects.create("
        "owner=User.objects.get(username='dana'), model='m', agent='claude-code').id)"
    )
    made = demo.manage("shell", "-c", code)
    context = browser.new_context(base_url=demo.url)
    try:
        page = sign_in(context, "dana")
        assert page.locator("#new-agent option[value=claude-code]").count() == 0
        page.goto(f"/c/{made.split()[-1]}/")
        page.wait_for_selector("body[data-ws=open]")
        page.fill("#prompt", "list files")
        page.press("#prompt", "Enter")
        page.wait_for_selector("#composer-alert:has-text('CLI agents need a real model')",
                               timeout=5_000)  # fmt: skip
        assert page.input_value("#prompt") == "list files"
        assert page.get_attribute("#status", "data-state") == "idle"
        assert page.locator("#messages [data-part=user]").count() == 0
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
    # The pill sits over the transcript's end, not over the Terminal's row below it (the
    # page review: at a fixed height, it covered that row).
    pill, log = (page.locator(el).bounding_box() for el in ("#new-content", "#messages"))
    assert pill["y"] + pill["height"] <= log["y"] + log["height"]
    page.click("#new-content")
    assert page.evaluate(at_bottom) and page.is_hidden("#new-content")
