"""Typed text is never lost: every refusal of a prompt leaves the text in #prompt and says why
beside the composer (not in the transcript), a prompt queued while one runs and then dropped
by Stop comes back into #prompt; Send becomes Stop while a prompt runs; an
over-long prompt is flagged while typing; a conversation deleted elsewhere says so and the
page stops reconnecting."""

from __future__ import annotations

import shutil
import threading

import pytest

from testkit.live import LiveServer
from testkit.model_server import HttpError, text_reply
from tests.e2e.conftest import contexts_on, send, sign_in, wait_idle

LIMIT = 200  # the strict server's HARNESS_MAX_PROMPT_CHARS


@pytest.fixture(scope="module")
def strict(tmp_path_factory, model):
    """A server of its own with small quotas (and one that tests may stop and start)."""
    bash = "sandbox" if shutil.which("bwrap") else "off"
    server = LiveServer(tmp_path_factory.mktemp("strict"), ANTHROPIC_API_KEY="test-key",
                        ANTHROPIC_BASE_URL=model.url, HARNESS_BASH=bash,
                        HARNESS_RUNS_PER_MINUTE="2", HARNESS_CONCURRENT_RUNS="1",
                        HARNESS_MAX_PROMPT_CHARS=str(LIMIT))  # fmt: skip
    server.start()
    server.create_users("rita", "carl", "lena", "otto", "gina")
    yield server
    server.stop()


@pytest.fixture
def strict_context(browser, strict):
    yield from contexts_on(browser, strict)


def alert_text(page) -> str:
    page.wait_for_selector("#composer-alert:not([hidden])")
    return page.inner_text("#composer-alert")


def transcript_errors(page) -> int:
    return page.locator("#messages [data-part=error]").count()


def new_conversation(page) -> None:
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")


def test_while_a_prompt_runs_send_is_stop_and_enter_queues_the_text_which_stop_gives_back(
    new_context, fresh_model
):
    fresh_model.enqueue(text_reply("streaming " * 30, hold=threading.Event()))
    context = new_context()
    page = sign_in(context, "alice")
    new_conversation(page)
    other = context.new_page()  # a second tab on the same conversation
    other.goto(page.url)
    other.wait_for_selector("body[data-ws=open]")
    button = page.locator("#cancel")
    assert button.inner_text() == "Send"
    idle_box = button.bounding_box()

    send(page, "talk for a long time")
    page.wait_for_function("() => document.body.classList.contains('running')")
    assert button.inner_text() == "Stop" and button.bounding_box() == idle_box
    assert page.input_value("#prompt") == ""  # accepted: the box is cleared
    other.wait_for_function("() => document.body.classList.contains('running')")
    other.fill("#prompt", "a second thought")
    other.press("#prompt", "Enter")  # while it runs: queued as a follow-up (docs/API.md)
    for tab in (page, other):
        tab.wait_for_selector("#queue [data-queued][data-mode=follow_up]")
        assert tab.inner_text("#queue .queued-text") == "a second thought"
    other.wait_for_function("() => document.querySelector('#prompt').value === ''")
    assert transcript_errors(other) == 0 and other.locator("[data-part=user]").count() == 1
    assert page.is_hidden("#composer-alert") and other.is_hidden("#composer-alert")

    other.click("#cancel")  # Stop: the queue is dropped and its text comes back
    other.wait_for_function("() => document.querySelector('#status').dataset.state === 'error'")
    assert other.inner_text("#cancel") == "Send"
    other.wait_for_function("() => document.querySelector('#prompt').value === 'a second thought'")
    assert other.is_hidden("#queue")
    fresh_model.enqueue(text_reply("now it runs"))
    other.press("#prompt", "Enter")
    other.wait_for_selector("text=now it runs")
    assert other.input_value("#prompt") == ""
    assert other.locator("[data-part=user] .user-text").last.inner_text() == "a second thought"


def test_a_retry_does_not_take_the_text_being_typed(new_context, fresh_model):
    failed = HttpError(529, "overloaded_error", "Overloaded", {"retry-after-ms": "5"})
    fresh_model.enqueue(failed, failed, failed)
    page = sign_in(new_context(), "bob")
    new_conversation(page)
    send(page, "summarise")
    page.wait_for_selector("button.retry")
    page.fill("#prompt", "my next prompt, half typed")
    fresh_model.enqueue(text_reply("Summary."))
    page.click("button.retry")
    page.wait_for_selector("text=Summary.")
    wait_idle(page)
    assert page.input_value("#prompt") == "my next prompt, half typed"


def test_the_prompt_grows_with_its_lines_up_to_a_limit_then_scrolls_and_shrinks_after_send(
    new_context, fresh_model
):
    """The demanding-user pass: the box stayed two rows high however many lines were typed."""
    long = "\n\n".join(f"Paragraph {n}." for n in range(60))
    fresh_model.enqueue(text_reply(long), text_reply("Noted."))
    page = sign_in(new_context(), "bob")
    new_conversation(page)
    send(page, "a long answer, please")
    wait_idle(page)
    at_end = "el => el.scrollHeight - el.scrollTop - el.clientHeight < 2"
    height = lambda: page.eval_on_selector("#prompt", "el => el.getBoundingClientRect().height")  # noqa: E731
    scrolls = "el => el.scrollHeight > el.clientHeight"
    empty = height()
    prompt = page.locator("#prompt")
    prompt.focus()
    for line in ("one", "two", "three", "four"):
        page.keyboard.type(line)
        page.keyboard.press("Shift+Enter")
    page.keyboard.type("five")
    grown = height()
    assert grown > empty + 40 and not prompt.evaluate(scrolls)  # every line shown
    # the transcript still at its end
    page.wait_for_function(f"() => ({at_end})(document.querySelector('#messages'))")
    page.keyboard.press("Control+Enter")  # a newline by the page's own key, grown too
    assert height() > grown
    for _ in range(3):  # shorter text, a shorter box
        page.keyboard.press("Backspace")
    assert empty < height() <= grown
    for _ in range(60):
        page.keyboard.press("Shift+Enter")
    limit = page.evaluate("innerHeight * 0.4")
    assert abs(height() - limit) < 2 and prompt.evaluate(scrolls)  # at its limit, it scrolls
    page.keyboard.press("Enter")
    page.wait_for_selector("#messages [data-part=user]")
    page.wait_for_function("() => document.querySelector('#prompt').value === ''")
    assert height() == empty
    page.fill("#prompt", "a\nb\nc\nd\ne")  # text put in by the page (history, a restore) too
    assert height() > empty + 40
    page.keyboard.press("Control+u")
    assert height() == empty
    page.fill("#prompt", "a long line that wraps " * 12)  # a narrower window wraps it more
    wide = height()
    page.set_viewport_size({"width": 700, "height": 900})
    page.wait_for_function("h => document.querySelector('#prompt').offsetHeight > h", arg=wide)
    assert not prompt.evaluate(scrolls)
    wait_idle(page)


def test_the_rate_limit_refuses_beside_the_composer_and_keeps_the_text(strict_context, fresh_model):
    page = sign_in(strict_context(), "rita")
    for n in range(2):
        send(page, f"prompt {n}")
        wait_idle(page)
    page.fill("#prompt", "one too many")
    page.press("#prompt", "Enter")
    assert "limit is 2" in alert_text(page)
    assert page.input_value("#prompt") == "one too many"
    assert transcript_errors(page) == 0 and page.locator("[data-part=user]").count() == 2


def test_the_concurrency_limit_refuses_beside_the_composer_and_keeps_the_text(
    strict_context, fresh_model
):
    fresh_model.enqueue(text_reply("slow " * 40, hold=threading.Event()))
    context = strict_context()
    first = sign_in(context, "carl")
    send(first, "a long one")
    first.wait_for_function("() => document.body.classList.contains('running')")
    second = context.new_page()
    second.goto("/")
    second.wait_for_selector("body[data-ws=open]")
    new_conversation(second)
    second.fill("#prompt", "meanwhile, elsewhere")
    second.press("#prompt", "Enter")
    assert "1 prompts running" in alert_text(second)
    assert second.input_value("#prompt") == "meanwhile, elsewhere"
    assert transcript_errors(second) == 0
    first.click("#cancel")
    first.wait_for_function("() => document.querySelector('#status').dataset.state === 'error'")
    second.press("#prompt", "Enter")
    second.wait_for_selector("[data-part=user]")
    assert second.input_value("#prompt") == "" and second.is_hidden("#composer-alert")


def test_an_over_long_prompt_is_flagged_while_typing_and_refused_whole(strict_context, fresh_model):
    page = sign_in(strict_context(), "lena")
    prompt = page.locator("#prompt")
    assert prompt.get_attribute("maxlength") is None
    prompt.fill("x" * (LIMIT * 9 // 10 - 1))
    assert page.is_hidden("#prompt-count")
    prompt.press("x")  # 90% of the limit: the counter appears
    assert page.inner_text("#prompt-count") == f"{LIMIT * 9 // 10} / {LIMIT}"
    prompt.fill("y" * (LIMIT + 30))
    assert page.inner_text("#prompt-count") == f"{LIMIT + 30} / {LIMIT}: 30 over the limit"
    assert "over" in page.get_attribute("#prompt-count", "class")
    requests = len(fresh_model.requests)
    prompt.press("Enter")
    assert alert_text(page) == (
        f"The prompt is {LIMIT + 30} characters; the limit is {LIMIT}. Nothing was sent."
    )
    assert prompt.input_value() == "y" * (LIMIT + 30)  # never cut
    page.wait_for_timeout(300)
    assert page.locator("[data-part=user]").count() == 0 and len(fresh_model.requests) == requests
    prompt.fill("short enough")  # back within the limit: the refusal and the counter go
    assert page.is_hidden("#composer-alert") and page.is_hidden("#prompt-count")
    prompt.press("Enter")
    page.wait_for_selector("[data-part=user]")
    assert prompt.input_value() == ""


def test_enter_while_the_socket_is_closed_keeps_the_text(strict, strict_context, fresh_model):
    page = sign_in(strict_context(), "otto")
    strict.kill()
    try:
        page.wait_for_selector("body[data-ws=closed]")
        page.fill("#prompt", "typed while the server was away")
        page.press("#prompt", "Enter")
        assert "Not connected" in alert_text(page)
        assert page.input_value("#prompt") == "typed while the server was away"
    finally:
        strict.start()
    page.wait_for_selector("body[data-ws=open]", timeout=40_000)
    assert page.is_hidden("#composer-alert")  # connected again: that reason has gone
    page.wait_for_timeout(500)
    assert page.locator("[data-part=user]").count() == 0  # it was not sent behind the user's back
    page.press("#prompt", "Enter")
    page.wait_for_selector("[data-part=user]")
    assert page.input_value("#prompt") == ""


def sockets_opened(page) -> list:
    opened = []
    page.on("websocket", lambda ws: opened.append(ws.url))
    return opened


def test_a_conversation_deleted_in_another_tab_says_so_and_stays_closed(new_context, fresh_model):
    context = new_context()
    page = sign_in(context, "bob")
    new_conversation(page)
    opened = sockets_opened(page)
    page.fill("#prompt", "a draft I care about")
    other = context.new_page()
    other.goto(page.url)
    other.wait_for_selector("body[data-ws=open]")
    other.on("dialog", lambda dialog: dialog.accept())
    other.click(".conv-actions summary")
    other.click(".conv-actions button.danger")

    page.wait_for_selector("#conversation-gone:not([hidden])", timeout=5_000)
    assert "deleted" in page.inner_text("#conversation-gone")
    assert page.get_attribute("#conversation-gone a", "href") == "/"
    assert page.get_attribute("body", "data-ws") == "closed" and page.is_hidden("#reconnecting")
    assert page.input_value("#prompt") == "a draft I care about"
    page.press("#prompt", "Enter")
    assert "Nothing was sent" in alert_text(page)
    assert page.input_value("#prompt") == "a draft I care about"
    page.wait_for_timeout(3_000)
    assert opened == [] and page.is_hidden("#reconnecting")
    gone = page.url
    page.click("#conversation-gone a")
    page.wait_for_selector("body[data-ws=open]")
    assert page.url != gone and "/c/" in page.url


def test_a_conversation_deleted_while_the_socket_was_down_is_found_gone(
    strict, strict_context, fresh_model
):
    page = sign_in(strict_context(), "gina")
    conversation = page.url.rstrip("/").rsplit("/", 1)[1]
    strict.kill()
    try:
        page.wait_for_selector("body[data-ws=closed]")
        strict.manage("shell", "-c", "from agent.models import Conversation; "
                      f"Conversation.objects.filter(id='{conversation}').delete()")  # fmt: skip
    finally:
        strict.start()
    # Its reconnect is refused (a failed handshake, to the page like a network down): the
    # page asks whether the conversation is still there, and stops.
    page.wait_for_selector("#conversation-gone:not([hidden])", timeout=40_000)
    assert page.is_hidden("#reconnecting")
    opened = sockets_opened(page)
    page.wait_for_timeout(4_000)
    assert opened == []  # the socket was closed for good: no retry, not even one timed before


def test_signing_out_in_another_tab_says_so(new_context, fresh_model):
    context = new_context()
    page = sign_in(context, "alice")
    other = context.new_page()
    other.goto(page.url)
    other.wait_for_selector("body[data-ws=open]")
    other.click(".account button")  # Sign out
    page.wait_for_selector("#signed-out:not([hidden])", timeout=5_000)
    assert page.is_hidden("#reconnecting")
    assert page.get_attribute("#signed-out a", "href").startswith("/accounts/login/?next=/c/")
