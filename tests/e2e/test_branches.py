"""Branches in the page (docs/API.md): edit a prompt into a new version, see its answer,
go back with ‹ ›, regenerate an answer, fork the conversation; a second tab follows."""

from __future__ import annotations

from testkit.model_server import text_reply
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
