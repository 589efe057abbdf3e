"""Branches in the page (docs/API.md): edit a prompt into a new version, see its answer,
go back with ‹ ›, regenerate an answer, fork the conversation; a second tab follows."""

from __future__ import annotations

from testkit.model_server import text_reply, tool_reply
from tests.e2e.conftest import send, sign_in, wait_idle


def user_texts(page) -> list[str]:
    shown = page.locator("#messages [data-part=user] .user-text").all_inner_texts()
    return [text.strip() for text in shown]


def answers(page) -> list[str]:
    return [t.strip() for t in page.locator("#messages [data-part=text] .md").all_inner_texts()]


def user_seqs(page) -> list[str]:
    return page.eval_on_selector_all(
        "#messages [data-part=user]", "els => els.map(e => e.dataset.seq)"
    )


def test_edit_switch_regenerate_and_fork_from_the_page(new_context, fresh_model):
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    fresh_model.enqueue(text_reply("Answer one"))
    send(page, "first")
    wait_idle(page)
    fresh_model.enqueue(text_reply("Answer two"))
    send(page, "second")
    wait_idle(page)
    other = page.context.new_page()  # a second tab on the same conversation
    other.goto(page.url)
    other.wait_for_selector("body[data-ws=open]")

    # Edit the second prompt: the transcript goes the new way, in both tabs.
    fresh_model.enqueue(text_reply("Answer to the edit"))
    page.locator("[data-part=user]").nth(1).hover()
    page.locator("[data-part=user]").nth(1).locator("[data-edit]").click()
    box = page.locator(".edit-form textarea")
    box.fill("second, edited")
    box.press("Enter")
    page.wait_for_selector("#messages [data-part=text] >> text=Answer to the edit")
    wait_idle(page)
    assert user_texts(page) == ["first", "second, edited"]
    assert answers(page) == ["Answer one", "Answer to the edit"]
    switch = page.locator("[data-branch-switch]")
    assert switch.locator(".branch-count").inner_text() == "2/2"
    assert "not rolled back" in switch.inner_text()
    other.wait_for_selector("#messages [data-part=text] >> text=Answer to the edit")
    assert user_texts(other) == ["first", "second, edited"]

    # ‹ goes back to the first version, whole; the other tab follows.
    switch.locator(".branch-prev").click()
    page.wait_for_selector("#messages [data-part=text] >> text=Answer two")
    assert user_texts(page) == ["first", "second"]
    assert page.locator("[data-branch-switch] .branch-count").inner_text() == "1/2"
    other.wait_for_selector("#messages [data-part=text] >> text=Answer two")

    # Regenerate the last answer: a third version of the second exchange's answer.
    fresh_model.enqueue(text_reply("Answer two, again"))
    page.locator("[data-part=text]").nth(1).locator("[data-regenerate]").click()
    page.wait_for_selector("#messages [data-part=text] >> text=Answer two, again")
    wait_idle(page)
    assert user_texts(page) == ["first", "second"]
    assert answers(page) == ["Answer one", "Answer two, again"]
    # The regenerated answer can be regenerated again, live, in both tabs (it lacked the
    # button until a reload: its run starts with no prompt of its own).
    for tab in (page, other):
        tab.wait_for_selector("#messages [data-part=text] >> text=Answer two, again")
        again = tab.locator("[data-part=text]").nth(1).locator("[data-regenerate]")
        assert again.count() == 1, tab
        assert again.get_attribute("data-regenerate") == user_seqs(tab)[1]
    page.reload()  # the first page load draws the same
    page.wait_for_selector("body[data-ws=open]")
    assert answers(page) == ["Answer one", "Answer two, again"]
    assert page.locator("[data-branch-switch]").count() >= 1

    # Fork: a new conversation of one's own with the messages so far.
    source = page.url
    page.click(".conv-actions summary")
    page.click("#fork-form button")
    page.wait_for_url(lambda url: url != source)
    page.wait_for_selector("body[data-ws=open]")
    assert answers(page) == ["Answer one", "Answer two, again"]
    assert "Fork of" in page.inner_text("h1")
    fresh_model.enqueue(text_reply("Forked on"))
    send(page, "go on")
    wait_idle(page)
    assert answers(page)[-1] == "Forked on"


def long_first_answer(new_context, fresh_model):
    """A new conversation whose first answer is longer than the screen."""
    page = sign_in(new_context(viewport={"width": 1440, "height": 900}), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    fresh_model.enqueue(text_reply("\n\n".join(f"Paragraph {n}." for n in range(60))))
    send(page, "first")
    wait_idle(page)
    return page


def test_a_prompt_is_edited_across_its_width_and_the_focus_comes_back(new_context, fresh_model):
    """The page review: the editor was a narrow box beside the prompt's Copy and Edit, with
    its buttons stacked; Esc lost the focus; opening it called the transcript "New content"."""
    page = long_first_answer(new_context, fresh_model)
    fresh_model.enqueue(text_reply("Short."))
    send(page, "second")
    wait_idle(page)
    prompt = page.locator("[data-part=user]").first
    prompt.scroll_into_view_if_needed()  # the reader went up to it: away from the end
    prompt.locator("[data-edit]").click()
    area = page.locator(".edit-form textarea")
    assert area.evaluate("e => e === document.activeElement")
    width = prompt.bounding_box()["width"]
    assert area.bounding_box()["width"] >= 0.85 * width
    assert prompt.locator(".part-actions").is_hidden()
    buttons = [page.locator(".edit-form button").nth(n).bounding_box() for n in (0, 1)]
    assert abs(buttons[0]["y"] - buttons[1]["y"]) < 2  # side by side, under the box
    assert buttons[0]["y"] > area.bounding_box()["y"]
    page.wait_for_timeout(100)
    assert page.is_hidden("#new-content")
    area.press("Escape")
    assert page.locator(".edit-form").count() == 0
    assert prompt.locator("[data-edit]").evaluate("e => e === document.activeElement")
    assert prompt.locator(".user-text").inner_text() == "first"
    page.wait_for_timeout(100)
    assert page.is_hidden("#new-content")


def test_a_shorter_version_shows_no_new_content_pill(new_context, fresh_model):
    """The page review: switched from a long version to one that fits the screen, the page
    said "↓ New content" with nothing below."""
    page = long_first_answer(new_context, fresh_model)
    fresh_model.enqueue(text_reply("Short."))
    page.locator("[data-part=user] [data-edit]").click()
    page.locator(".edit-form textarea").fill("first, shorter")
    page.locator(".edit-form textarea").press("Enter")
    page.wait_for_selector("#messages [data-part=text] >> text=Short.")
    wait_idle(page)
    page.click("[data-branch-switch] .branch-prev")  # back to the long one
    page.wait_for_selector("#messages [data-part=text] >> text=Paragraph 59.")
    page.evaluate("() => { document.querySelector('#messages').scrollTop = 0; }")
    page.wait_for_timeout(100)
    page.click("[data-branch-switch] .branch-next")
    page.wait_for_selector("#messages [data-part=text] >> text=Short.")
    page.wait_for_timeout(300)
    fits = "m => m.scrollHeight <= m.clientHeight"  # the short version: nothing below
    assert page.eval_on_selector("#messages", fits)
    assert page.is_hidden("#new-content")
    # The versions switch sits in the parts' column, not at the transcript's edge.
    switch = page.locator("[data-branch-switch]").bounding_box()
    assert abs(switch["x"] - page.locator("[data-part=user]").first.bounding_box()["x"]) < 2


def test_regenerate_leaves_no_htmx_error_in_the_console(new_context, fresh_model):
    """The demanding-user pass: after Regenerate, htmx logged ``htmx:oobErrorNoTarget`` for
    ``#live-text``: the catch-up that followed the redraw deleted a live block the page did
    not have (the server cannot know; the sync marker now says so and the page acts on it)."""
    page = sign_in(new_context(), "alice")
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    fresh_model.enqueue(tool_reply(("list_dir", {"path": "."}), text="Looking."),
                        text_reply("First answer"))  # fmt: skip
    send(page, "what is here?")
    wait_idle(page)
    for again in ("Second answer", "Third answer"):
        fresh_model.enqueue(text_reply(again))
        page.locator("#messages [data-regenerate]:visible").click()
        page.wait_for_selector(f"#messages [data-part=text] >> text={again}")
        wait_idle(page)
    assert errors == []
    assert page.locator("#live-text").count() == 0
