"""Runs outlive the page: reload mid-run catches up exactly, a second page opened mid-run
joins it, and nothing is shown twice."""

from __future__ import annotations

from testkit.model_server import text_reply, tool_reply
from tests.e2e.conftest import parts, send, sign_in, wait_idle

ANSWER = " ".join(f"w{i}" for i in range(400))


def test_reload_mid_run_catches_up_exactly(new_context, fresh_model):
    # Nine seconds of text: the reload comes about a third of the way in, and a loaded
    # machine's reload must still find the block streaming.
    fresh_model.enqueue(tool_reply(("list_dir", {"path": "."})),
                        text_reply(ANSWER, delay=0.03))  # fmt: skip
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "stream a long answer")
    page.wait_for_function(  # over a second in: partial text is stored once a second
        "() => (document.querySelector('#live-text') || {innerText: ''}).innerText.length > 900"
    )
    page.reload()  # mid-block: the page renders the partial text, the socket continues it
    page.wait_for_selector("#live-text")
    assert page.inner_text("#live-text").startswith("w0 w1 w2")
    page.wait_for_selector("body[data-ws=open]")
    wait_idle(page)
    shown = parts(page)
    assert [kind for kind, _, _ in shown] == ["user", "tool", "text"]
    assert shown[-1][2] == ANSWER  # all of it, once
    assert len({seq for _, seq, _ in shown}) == len(shown)
    fresh = page.context.new_page()
    fresh.goto(page.url)
    fresh.wait_for_selector("body[data-ws=open]")
    assert parts(fresh) == shown


def test_page_opened_mid_run_joins_the_stream(new_context, fresh_model):
    fresh_model.enqueue(text_reply(ANSWER, delay=0.01))
    context = new_context()
    page = sign_in(context, "bob")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "long answer")
    page.wait_for_selector("#live-text")
    late = context.new_page()
    late.goto(page.url)
    late.wait_for_selector("body[data-ws=open]")
    wait_idle(late)
    wait_idle(page)
    assert parts(late) == parts(page)
    assert parts(late)[-1][2] == ANSWER


def test_server_killed_mid_run_leaves_a_readable_conversation(new_context, fresh_model, live):
    fresh_model.enqueue(text_reply(ANSWER, delay=0.02))
    page = sign_in(new_context(), "bob")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "answer slowly")
    page.wait_for_function(  # over a second in, so some partial text has been stored
        "() => (document.querySelector('#live-text') || {innerText: ''}).innerText.length > 600"
    )
    live.kill()  # SIGKILL mid-stream
    page.wait_for_selector("body[data-ws=closed]")
    assert page.is_visible("#reconnecting")
    # However many tries failed while the server was down (a loaded machine starts it
    # slowly), the next comes within seconds, not the minute a full-jitter backoff can reach.
    waits = page.evaluate("[0, 3, 6, 20].map((n) => transport.config.reconnectDelay(n))")
    assert all(0 < wait <= 4000 for wait in waits), waits
    live.start()  # same port, same database
    page.wait_for_selector("body[data-ws=open]", timeout=30_000)
    # The new process finds the dead run's lapsed lease and interrupts it; the page is told.
    page.wait_for_function("() => document.querySelector('#status').dataset.state === 'error'",
                           timeout=30_000)  # fmt: skip
    assert page.is_hidden("#reconnecting")
    assert page.locator("#live-text").count() == 0
    text = page.locator("[data-part=text] .md").last.inner_text()
    assert text.startswith("w0 w1 w2") and len(text) < len(ANSWER)  # at most 1 s is lost
    assert "server stopped" in page.locator("[data-part=error]").last.inner_text()
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    assert page.locator("[data-part=text] .md").last.inner_text() == text
    fresh_model.enqueue(text_reply("working again"))
    send(page, "are you back?")
    page.wait_for_selector("text=working again")
    sent = fresh_model.bodies[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    # the partial answer is in the history (the page shows no trailing space it may end in)
    assert sent[1]["content"][0]["text"].rstrip() == text


def test_upstream_failure_shows_the_api_message_and_retry_resends_the_prompt(
    new_context, fresh_model
):
    from testkit.model_server import HttpError

    overloaded = HttpError(529, "overloaded_error", "Overloaded, try later",
                           {"retry-after-ms": "5"})  # fmt: skip
    fresh_model.enqueue(overloaded, overloaded, overloaded)  # the SDK retries twice
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "please summarise the repo")
    page.wait_for_function("() => document.querySelector('#status').dataset.state === 'error'")
    error = page.locator("[data-part=error]").last
    assert "Overloaded, try later" in error.inner_text() and "529" in error.inner_text()
    assert "Overloaded" in page.inner_text("#status")
    fresh_model.enqueue(text_reply("Here is the summary."))
    error.locator("button.retry").click()
    page.wait_for_selector("text=Here is the summary.")
    wait_idle(page)
    users = page.locator("[data-part=user]")
    assert users.count() == 2
    assert users.last.locator(".user-text").inner_text() == "please summarise the repo"
    assert fresh_model.bodies[-1]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "please summarise the repo"}]}
    ]  # the failed attempt left no trace in the history sent upstream
