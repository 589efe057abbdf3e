"""Runs outlive the page: reload mid-run catches up exactly, a second page opened mid-run
joins it, and nothing is shown twice."""

from __future__ import annotations

from tests.e2e.conftest import parts, send, sign_in, wait_idle
from tests.model_server import text_reply, tool_reply

ANSWER = " ".join(f"w{i}" for i in range(400))


def test_reload_mid_run_catches_up_exactly(new_context, fresh_model):
    fresh_model.enqueue(tool_reply(("list_dir", {"path": "."})),
                        text_reply(ANSWER, delay=0.01))  # fmt: skip
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "stream a long answer")
    page.wait_for_function(
        "() => (document.querySelector('#live-text') || {innerText: ''}).innerText.length > 200"
    )
    page.reload()  # mid-block: the page renders the partial text, the socket continues it
    assert page.locator("#live-text").count() == 1
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
