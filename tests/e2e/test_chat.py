"""The chat in a real browser: sign-in, streaming, tool cards, reload, history, tabs, help,
cancel."""

from __future__ import annotations

import re
import threading

from testkit.model_server import text_reply, tool_reply
from tests.e2e.conftest import parts, send, sign_in, wait_idle


def test_sign_in_lands_on_a_conversation_with_an_open_socket(new_context, fresh_model):
    page = sign_in(new_context(), "alice")
    assert re.search(r"/c/[0-9a-f-]{36}/$", page.url)
    assert page.get_attribute("body", "data-ws") == "open"
    assert page.get_attribute("#status", "data-state") == "idle"
    assert page.is_visible("#prompt") and page.is_visible("#cancel")


def test_streamed_answer_with_tool_cards(new_context, fresh_model):
    fresh_model.enqueue(
        tool_reply(("write", {"path": "notes/todo.md", "content": "- ship it\n"}),
                   ("read", {"path": "notes/todo.md"}), text="I'll write the note."),
        # Slow enough (about 4 s) that the streaming state is seen on a loaded machine.
        text_reply("Done. The note says **ship it**.\n\n```python\nprint('ok')\n```",
                   delay=0.25),
    )  # fmt: skip
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "write a todo note")
    page.wait_for_selector("#live-text")  # text appears while it streams
    wait_idle(page)
    cards = page.query_selector_all("[data-part=tool]")
    assert [c.get_attribute("data-tool-name") for c in cards] == ["write", "read"]
    assert [c.get_attribute("data-tool-status") for c in cards] == ["ok", "ok"]
    assert "- ship it" in cards[1].query_selector(".tool-result").inner_text()
    last = page.query_selector_all("[data-part=text]")[-1]
    assert last.query_selector("strong").inner_text() == "ship it"
    assert last.query_selector(".code-wrap .copy") is not None  # code blocks get a copy button
    assert page.query_selector("#live-text") is None
    kinds = [p[0] for p in parts(page)]
    assert kinds[-5:] == ["user", "text", "tool", "tool", "text"]


def test_reload_shows_the_same_transcript(new_context, fresh_model):
    fresh_model.enqueue(tool_reply(("list_dir", {"path": "."})), text_reply("Listed *it*."))
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "list the workspace")
    wait_idle(page)
    before = parts(page)
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    assert parts(page) == before
    assert [p[0] for p in before] == ["user", "tool", "text"]
    assert all(seq.isdigit() for _, seq, _ in before)


def test_an_answer_shows_what_its_calls_used_live_and_after_a_reload(new_context, fresh_model):
    fresh_model.enqueue(tool_reply(("list_dir", {"path": "."}), text="Looking."),
                        text_reply("Listed."))  # fmt: skip
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "list the workspace")
    wait_idle(page)
    cost = "[data-part=text].answer-end .answer-cost"
    # Both calls (10 input and 20 output tokens each, by the scripted model), summed.
    page.wait_for_function("sel => document.querySelector(sel)?.textContent.startsWith('60 ')",
                           arg=cost)  # fmt: skip
    live = page.inner_text(cost)
    assert re.fullmatch(r"60 tokens · \$0\.\d{4}", live), live
    assert "20 input tokens" in page.get_attribute(cost, "title")
    assert page.locator("[data-part=text] .answer-cost:visible").count() == 1  # on the end only
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    assert page.inner_text(cost) == live


def test_an_answer_without_text_yet_leaves_no_htmx_error_in_the_console(new_context,
                                                                         fresh_model):  # fmt: skip
    """The demanding-user pass: a model call that ended before the answer had a text part
    (a tool call first, a stop mid-stream) sent its cost to an action row the page did not
    have yet, and htmx logged ``htmx:oobErrorNoTarget`` for ``.answer-cost``."""
    page = sign_in(new_context(), "alice")
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    fresh_model.enqueue(tool_reply(("list_dir", {"path": "."})), text_reply("Listed."))
    send(page, "list the workspace, no words first")
    wait_idle(page)
    cost = "[data-part=text].answer-end .answer-cost"
    assert page.inner_text(cost).startswith("60 tokens")  # both calls, in the one text part
    fresh_model.enqueue(text_reply("streaming slowly " * 20, hold=threading.Event()))
    send(page, "talk, then be stopped")
    page.wait_for_selector("#live-text")
    page.click("#cancel")
    page.wait_for_selector("[data-part=error][data-code=cancelled]")
    page.wait_for_selector("#messages [data-part=text] >> nth=1")  # its partial text, kept
    assert errors == []


def test_prompt_history_survives_a_new_browser_session(new_context, fresh_model):
    page = sign_in(new_context(), "bob")
    for prompt in ("first prompt", "second\nprompt"):
        send(page, prompt)
        wait_idle(page)
    page.context.close()
    page = sign_in(new_context(), "bob")
    prompt = page.locator("#prompt")
    prompt.fill("my draft")
    prompt.press("ArrowUp")
    assert prompt.input_value() == "second\nprompt"
    prompt.press("ArrowUp")  # caret is at the end (last line): first moves within the text
    prompt.press("Control+Home")
    prompt.press("ArrowUp")
    assert prompt.input_value() == "first prompt"
    prompt.press("ArrowDown")
    assert prompt.input_value() == "second\nprompt"
    prompt.press("ArrowDown")
    assert prompt.input_value() == "my draft"


def test_shift_enter_adds_a_newline_and_enter_sends(new_context, fresh_model):
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    prompt = page.locator("#prompt")
    prompt.type("line one")
    prompt.press("Shift+Enter")
    prompt.type("line two")
    prompt.press("Control+Enter")
    prompt.type("line three")
    assert prompt.input_value() == "line one\nline two\nline three"
    prompt.press("Enter")
    wait_idle(page)
    assert prompt.input_value() == ""
    sent = page.locator("[data-part=user] .user-text").last
    assert sent.inner_text() == "line one\nline two\nline three"
    prompt.type("to be cleared")
    prompt.press("Control+u")
    assert prompt.input_value() == ""


def test_two_tabs_on_one_conversation_see_the_same_run(new_context, fresh_model):
    context = new_context()
    first = sign_in(context, "alice")
    first.click(".new-conv")
    first.wait_for_selector("body[data-ws=open]")
    second = context.new_page()
    second.goto(first.url)
    second.wait_for_selector("body[data-ws=open]")
    fresh_model.enqueue(text_reply("Seen in **both** tabs.", delay=0.02))
    send(first, "hello from tab one")
    wait_idle(second)
    assert "hello from tab one" in second.locator("[data-part=user]").last.inner_text()
    second.wait_for_selector("[data-part=text] strong")
    assert parts(first) == parts(second)


def test_help_overlay_toggles_with_question_mark_f1_and_escape(new_context, fresh_model):
    page = sign_in(new_context(), "alice")
    assert page.is_hidden("#help")
    page.locator("#messages").click()
    page.keyboard.press("?")
    assert page.is_visible("#help")
    assert "Ctrl" in page.inner_text("#help") and "Enter" in page.inner_text("#help")
    page.keyboard.press("Escape")
    assert page.is_hidden("#help")
    page.keyboard.press("F1")
    assert page.is_visible("#help")
    page.keyboard.press("F1")
    assert page.is_hidden("#help")
    page.locator("#prompt").type("what? really?")  # ? typed in the prompt is just text
    assert page.is_hidden("#help") and page.locator("#prompt").input_value() == "what? really?"


def test_cancel_stops_the_run_and_keeps_the_partial_answer(new_context, fresh_model):
    fresh_model.enqueue(text_reply("streaming " * 300, hold=threading.Event()))
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "talk for a long time")
    page.wait_for_selector("#live-text")
    page.wait_for_function("() => document.body.classList.contains('running')")
    page.click("#cancel")
    page.wait_for_function("() => document.querySelector('#status').dataset.state === 'error'")
    assert "Cancelled" in page.inner_text("#status")
    text = page.locator("[data-part=text]").last.inner_text()
    assert text.startswith("streaming") and text.count("streaming") < 300
    assert page.locator("[data-part=error]").last.inner_text().startswith("Cancelled")
    fresh_model.enqueue(text_reply("back to normal"))
    send(page, "again")
    page.wait_for_selector("text=back to normal")


def test_conversation_list_new_rename_switch_delete(new_context, fresh_model):
    page = sign_in(new_context(), "bob")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "a prompt that becomes the title")
    wait_idle(page)
    # The heading and the tab's title are named live, without a reload.
    page.wait_for_selector("#conv-title:text-is('a prompt that becomes the title')")
    page.wait_for_function("() => document.title === 'a prompt that becomes the title · Harness'")
    page.reload()
    assert page.inner_text("#conv-title") == "a prompt that becomes the title"
    page.fill("#prompt", "half-typed thought")
    page.click(".conv-actions summary")
    page.fill(".conv-actions input[name=title]", "Renamed chat")
    page.click(".conv-actions button:text('Rename')")
    page.wait_for_selector("#conv-title:text-is('Renamed chat')")
    page.wait_for_selector("#conv-list .conv-link.current:text-is('Renamed chat')")
    assert page.title() == "Renamed chat · Harness"
    assert not page.is_visible(".conv-actions .menu-panel")  # the menu closed
    assert page.input_value("#prompt") == "half-typed thought"  # the page never left
    page.fill("#prompt", "")
    current = page.url
    page.click(".new-conv")
    assert page.url != current
    page.click("a.conv-link:text('Renamed chat')")
    assert page.url == current
    page.wait_for_selector("body[data-ws=open]")  # the page it went back to is running
    page.on("dialog", lambda dialog: dialog.accept())
    page.click(".conv-actions summary")
    with page.expect_navigation():  # (the form is sent once the dialog is accepted)
        page.click(".conv-actions button.danger")
    assert "Renamed chat" not in page.inner_text(".conv-list")


def test_phone_width_layout_is_usable(new_context, fresh_model):
    page = sign_in(new_context(viewport={"width": 390, "height": 780}), "alice")
    assert page.is_visible("#prompt") and page.is_visible("#menu-toggle")
    assert not page.locator("#sidebar").is_visible() or page.evaluate(
        "() => document.querySelector('#sidebar').getBoundingClientRect().right <= 0"
    )
    page.click("#menu-toggle")
    page.wait_for_timeout(300)
    assert page.evaluate(
        "() => document.querySelector('#sidebar').getBoundingClientRect().left >= 0"
    )
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 390
