"""Steering the agent from the page (docs/API.md): while a prompt runs, Enter queues a
follow-up and Alt+Enter steers; the queue is listed in #queue, each with a remove control;
Stop gives the queued text back to #prompt. A bash call that waits for a file in the
workspace holds a tool running until the test opens it (a server of its own, with bash
as a plain subprocess)."""

from __future__ import annotations

import uuid

import pytest

from testkit.live import LiveServer
from testkit.model_server import text_reply, tool_reply
from tests.e2e.conftest import contexts_on, send, sign_in, wait_idle

USER = "quincy"


@pytest.fixture(scope="module")
def server(tmp_path_factory, model):
    server = LiveServer(tmp_path_factory.mktemp("queue-e2e"), ANTHROPIC_API_KEY="test-key",
                        ANTHROPIC_BASE_URL=model.url, HARNESS_BASH="unsafe",
                        HARNESS_RUNS_PER_MINUTE="1000", HARNESS_CONCURRENT_RUNS="10")  # fmt: skip
    server.start()
    server.create_users(USER)
    yield server
    server.stop()


@pytest.fixture
def context(browser, server):
    yield from contexts_on(browser, server)


@pytest.fixture(scope="module")
def workspace(server):
    code = f"from agent.models import User; print(User.objects.get(username={USER!r}).id)"
    return server.root / "workspaces" / server.manage("shell", "-c", code).strip().splitlines()[-1]


class Gate:
    def __init__(self, workspace):
        self.name = f"gate-{uuid.uuid4().hex[:8]}"
        self.workspace = workspace
        self.call = ("bash", {"command": f"while [ ! -e {self.name} ]; do sleep 0.02; done"})

    def open(self):
        (self.workspace / self.name).write_text("")


def open_conversation(context):
    page = sign_in(context(), USER)
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    return page


def start_gated(page, gate, model, *more):
    model.enqueue(tool_reply(gate.call, *more))
    send(page, "start working")
    page.wait_for_selector("#status[data-state=running_tool]")
    assert "Alt+Enter steers" in page.get_attribute("#prompt", "placeholder")


def queue(page, text, *, steer=False):
    before = page.locator("#queue [data-queued]").count()
    page.fill("#prompt", text)
    page.press("#prompt", "Alt+Enter" if steer else "Enter")
    page.wait_for_function(
        "n => document.querySelectorAll('#queue [data-queued]').length > n", arg=before
    )
    page.wait_for_function("() => document.querySelector('#prompt').value === ''")


def queued(page):
    return page.eval_on_selector_all(
        "#queue [data-queued]",
        "els => els.map(e => [e.dataset.mode, e.querySelector('.queued-text').innerText])",
    )


def test_queue_two_follow_ups_remove_one_and_the_other_runs_after(context, fresh_model, workspace):
    page = open_conversation(context)
    gate = Gate(workspace)
    start_gated(page, gate, fresh_model)
    fresh_model.enqueue(text_reply("Gate done."), text_reply("Answered the follow-up."))
    queue(page, "first follow-up")
    queue(page, "second follow-up")
    assert queued(page) == [["follow_up", "first follow-up"], ["follow_up", "second follow-up"]]
    # A reload shows the queue (from the event log).
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    assert queued(page) == [["follow_up", "first follow-up"], ["follow_up", "second follow-up"]]
    # The remove control is a labelled button, reached and pressed with the keyboard.
    remove = page.locator("#queue [data-queued]").first.locator("button.unqueue")
    assert "first follow-up" in remove.get_attribute("aria-label")
    remove.focus()
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.querySelectorAll('#queue [data-queued]').length === 1")
    assert queued(page) == [["follow_up", "second follow-up"]]
    # The focus went to the Remove button left (its own went with its row).
    page.wait_for_function("() => document.activeElement.matches('#queue .unqueue')")
    assert "second follow-up" in page.evaluate("() => document.activeElement.ariaLabel")
    gate.open()
    page.wait_for_selector("text=Answered the follow-up.")
    wait_idle(page)
    users = page.eval_on_selector_all(
        "#messages [data-part=user]",
        "els => els.map(e => [e.dataset.mode || '', e.querySelector('.user-text').innerText])",
    )
    assert users == [["", "start working"], ["follow_up", "second follow-up"]]
    assert page.is_hidden("#queue") and page.input_value("#prompt") == ""
    assert page.get_attribute("#prompt", "placeholder").startswith("Ask the agent")
    assert page.locator("#messages [data-part=error]").count() == 0


def test_alt_enter_steers_mid_tool_and_the_turns_other_calls_are_skipped(
    context, fresh_model, workspace
):
    page = open_conversation(context)
    gate = Gate(workspace)
    start_gated(page, gate, fresh_model, ("write", {"path": "never.txt", "content": "x"}))
    fresh_model.enqueue(text_reply("Changing course as asked."))
    queue(page, "stop and explain instead", steer=True)
    assert queued(page) == [["steer", "stop and explain instead"]]
    gate.open()
    page.wait_for_selector("text=Changing course as asked.")
    wait_idle(page)
    assert page.get_attribute("[data-tool-name=bash]", "data-tool-status") == "ok"
    assert page.get_attribute("[data-tool-name=write]", "data-tool-status") == "error"
    assert "steering message" in page.inner_text("[data-tool-name=write] .tool-result")
    steer = page.locator("#messages [data-part=user][data-mode=steer]")
    assert steer.locator(".user-text").inner_text() == "stop and explain instead"
    assert not (workspace / "never.txt").exists()
    assert page.is_hidden("#queue")


def test_stop_gives_the_queued_text_back_to_the_prompt(context, fresh_model, workspace):
    page = open_conversation(context)
    gate = Gate(workspace)
    start_gated(page, gate, fresh_model)
    queue(page, "bring me back")
    queue(page, "and me", steer=True)
    page.fill("#prompt", "half typed")
    page.click("#cancel")  # Stop
    page.wait_for_function("() => document.querySelector('#status').dataset.state === 'error'")
    page.wait_for_function("() => document.querySelector('#prompt').value.includes('and me')")
    assert page.input_value("#prompt") == "half typed\n\nbring me back\n\nand me"
    assert page.is_hidden("#queue")
    # Offered once, in the box: the not-sent parts stay in the page's DOM, hidden.
    assert page.locator("#messages [data-part=error][data-code=not_sent]").count() == 2
    assert page.locator("#messages [data-code=not_sent]:visible").count() == 0
    # The running bash call did run: its card does not say "before it ran".
    result = page.inner_text("[data-tool-name=bash] .tool-result")
    assert "while it ran" in result and "before it ran" not in result
    gate.open()
    # A reload keeps them shown as not sent (their text in the transcript), not in #prompt.
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    assert page.locator("#messages [data-code=not_sent] .not-sent-text").all_inner_texts() == [
        "bring me back", "and me"]  # fmt: skip
    assert page.input_value("#prompt") == ""


def test_the_help_lists_the_queue_keys(context):
    page = open_conversation(context)
    page.press("#prompt", "?")
    page.wait_for_selector("#help:not([hidden])")
    text = page.inner_text("#help")
    assert "Queue the text as a follow-up" in text and "Steer" in text
    assert "Search your conversations" in text  # (the review found the search keys missing)
