"""Copy on every message part: a prompt as typed, an answer as shown, and an answer's
markdown as the model wrote it; the same for parts on the first page and parts that arrive
live, from the mouse or the keyboard, with the Clipboard API or without it."""

from __future__ import annotations

from testkit.model_server import text_reply, tool_reply
from tests.e2e.conftest import send, sign_in, wait_idle

PROMPT = "Explain <b>this</b> & that:\n  - keep the indent\nthanks"
ANSWER = (
    "Here is **bold**, `code` and <img src=x onerror=alert(1)> raw HTML.\n\n"
    "- one\n- two &amp; three\n\n```python\nprint('<hi>')\n```\n\n</template><p>after</p>"
)
LIVE_ANSWER = "A *live* answer with [a link](https://example.com) and 5 < 6 > 4."

CLIPBOARD = "() => navigator.clipboard.readText()"


def clipboard_context(new_context):
    context = new_context()
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    return context


def click_and_read(page, button) -> str:
    page.evaluate("() => navigator.clipboard.writeText('(nothing yet)')")
    button.click()
    page.wait_for_function("(el) => el.textContent === 'Copied'", arg=button.element_handle())
    return page.evaluate(CLIPBOARD)


def copy_buttons(part) -> dict[str, object]:
    buttons = part.locator(".part-actions button.copy")
    return {buttons.nth(i).inner_text(): buttons.nth(i) for i in range(buttons.count())}


def test_copy_a_prompt_and_an_answer_as_text_or_markdown_from_the_first_page(
    new_context, fresh_model
):
    fresh_model.enqueue(text_reply(ANSWER))
    page = sign_in(clipboard_context(new_context), "bob")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, PROMPT)
    wait_idle(page)
    page.reload()  # every part now comes with the first page
    page.wait_for_selector("body[data-ws=open]")
    user = page.locator("[data-part=user]").last
    answer = page.locator("[data-part=text]").last
    # The raw source rides along escaped: inert text, no element made from it.
    assert answer.locator("template.md-source").evaluate("t => t.content.children.length") == 0
    assert page.locator("#messages img").count() == 0

    assert list(copy_buttons(user)) == ["Copy"]
    assert click_and_read(page, copy_buttons(user)["Copy"]) == PROMPT

    buttons = copy_buttons(answer)
    assert list(buttons) == ["Copy", "Copy as markdown"]
    assert click_and_read(page, buttons["Copy as markdown"]) == ANSWER
    shown = click_and_read(page, buttons["Copy"])
    assert "Here is bold, code and" in shown and "**" not in shown and "print('<hi>')" in shown
    # the confirmation goes, the label comes back
    page.wait_for_function(
        "(el) => el.textContent === 'Copy as markdown'",
        arg=buttons["Copy as markdown"].element_handle(),
    )
    labels = [b.get_attribute("aria-label") for b in buttons.values()]
    assert labels == ["Copy (this answer)", "Copy as markdown (this answer)"]


def test_copy_works_the_same_on_parts_pushed_live_and_from_the_keyboard(new_context, fresh_model):
    fresh_model.enqueue(text_reply(LIVE_ANSWER))
    page = sign_in(clipboard_context(new_context), "bob")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "say something live")
    wait_idle(page)  # no reload: both parts arrived over the socket
    answer = page.locator("[data-part=text]").last
    markdown = copy_buttons(answer)["Copy as markdown"]
    page.evaluate("() => navigator.clipboard.writeText('(nothing yet)')")
    markdown.focus()
    page.keyboard.press("Enter")
    page.wait_for_function("(el) => el.textContent === 'Copied'", arg=markdown.element_handle())
    assert page.evaluate(CLIPBOARD) == LIVE_ANSWER
    assert page.locator("#copy-status").inner_text() == "Copied to the clipboard"
    user = page.locator("[data-part=user]").last
    assert click_and_read(page, copy_buttons(user)["Copy"]) == "say something live"


def test_copy_falls_back_when_the_clipboard_api_is_missing(new_context, fresh_model):
    fresh_model.enqueue(text_reply("plain **fallback** text"))
    page = sign_in(clipboard_context(new_context), "bob")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "no clipboard api here")
    wait_idle(page)
    page.evaluate("""() => {
      window.__clipboard = navigator.clipboard;
      Object.defineProperty(Navigator.prototype, 'clipboard', {get: () => undefined});
    }""")
    button = copy_buttons(page.locator("[data-part=text]").last)["Copy as markdown"]
    button.click()
    page.wait_for_function("(el) => el.textContent === 'Copied'", arg=button.element_handle())
    assert page.evaluate("() => window.__clipboard.readText()") == "plain **fallback** text"


def test_one_action_row_per_answer_for_the_whole_of_it(new_context, fresh_model):
    """The first-use review: every text part (a one-line preface before a tool call
    included) had its own Copy · Copy as markdown · Regenerate row, mid-run too."""
    fresh_model.enqueue(
        tool_reply(("list_dir", {"path": "."}), text="Looking **first**."),
        text_reply("Found them.", delay=0.05),
    )
    page = sign_in(clipboard_context(new_context), "bob")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "what is here?")
    page.wait_for_selector("[data-part=tool]")
    visible_rows = "#messages [data-part=text] .part-actions:visible"
    assert page.locator(visible_rows).count() == 0  # mid-run: none
    wait_idle(page)
    texts = page.locator("[data-part=text]")
    assert texts.count() == 2
    assert page.locator(visible_rows).count() == 1
    assert page.locator("#messages [data-regenerate]:visible").count() == 1
    buttons = copy_buttons(texts.last)
    assert click_and_read(page, buttons["Copy as markdown"]) == "Looking **first**.\n\nFound them."
    assert click_and_read(page, buttons["Copy"]) == "Looking first.\n\nFound them."
    # When it was sent and answered, at a glance (the review: no timestamps to be seen).
    for part in (page.locator("[data-part=user]").last, texts.last):
        time = part.locator(".part-actions time.part-time")
        assert time.is_visible() and ":" in time.inner_text()
        assert time.get_attribute("datetime").endswith("Z")
    page.reload()  # the first page draws the same
    page.wait_for_selector("body[data-ws=open]")
    assert page.locator(visible_rows).count() == 1
    assert page.locator("[data-part=text]").last.locator("time.part-time").is_visible()


def copy_shown_on_hover(new_context, block: str, pointed: str, copy: str) -> str:
    """Sends a prompt (its answer enqueued) in a new conversation; the last ``block``'s Copy
    is hidden until ``pointed`` (within it) is pointed at, then copies: what it copied."""
    page = sign_in(clipboard_context(new_context), "bob")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "a long line")
    wait_idle(page)
    button = page.locator(f"{block} > {copy}").last
    opacity = "(el) => getComputedStyle(el).opacity"
    page.mouse.move(0, 0)
    page.wait_for_function(f"(el) => ({opacity})(el) === '0'", arg=button.element_handle())
    page.locator(f"{block} {pointed}".strip()).last.hover()
    page.wait_for_function(f"(el) => ({opacity})(el) === '1'", arg=button.element_handle())
    return click_and_read(page, button)


def test_a_code_blocks_copy_does_not_cover_a_long_line_until_pointed_at(new_context, fresh_model):
    """The first-use review: Copy covered the end of long code lines."""
    fresh_model.enqueue(text_reply("```\n" + "x = 1  # " + "long " * 60 + "\n```"))
    copied = copy_shown_on_hover(new_context, "[data-part=text] .code-wrap", "pre", ".copy")
    assert copied.startswith("x = 1  # long")


def test_a_tool_results_copy_does_not_cover_a_long_line_until_pointed_at(new_context, fresh_model):
    """The page review: a tool result's Copy stayed over the end of its long first line."""
    fresh_model.enqueue(
        tool_reply(("write", {"path": "long.txt", "content": "y = 2  # " + "wide " * 60 + "\n"}))
    )
    fresh_model.enqueue(tool_reply(("read", {"path": "long.txt"})))
    fresh_model.enqueue(text_reply("Read it."))
    copied = copy_shown_on_hover(new_context, "[data-part=tool] .tool-result", "", ".copy-result")
    assert "y = 2  # wide" in copied


AFTER_ALL_PARTS = """() => {
  const kids = Array.from(document.querySelectorAll('#messages > *'));
  const row = kids.findIndex((el) => el.matches('.part-actions:has([data-regenerate])'));
  const lastPart = kids.findLastIndex((el) => el.dataset.part && el.dataset.part !== 'user');
  return row > lastPart && getComputedStyle(kids[row]).display !== 'none';
}"""


def test_a_stopped_answers_action_row_comes_after_its_last_part(new_context, fresh_model):
    """The demanding-user pass: Copy · Copy as markdown · Regenerate of an answer stopped
    during a tool call showed above the tool card, as if the answer ended there."""
    fresh_model.enqueue(tool_reply(("bash", {"command": "sleep 10"}), text="Running **it**."))
    page = sign_in(clipboard_context(new_context), "bob")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "sleep a while")
    page.wait_for_selector("[data-part=tool]")
    page.click("#cancel")
    page.wait_for_selector("#status[data-state=error]")
    for _ in range(2):  # live, then as the first page draws it
        page.wait_for_function(AFTER_ALL_PARTS)
        assert page.locator("#messages [data-regenerate]:visible").count() == 1
        markdown = page.locator("#messages > .answer-row [data-copy=markdown]")
        assert click_and_read(page, markdown) == "Running **it**."
        page.reload()
        page.wait_for_selector("body[data-ws=open]")
