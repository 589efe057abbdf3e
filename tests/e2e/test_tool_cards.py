"""Tool cards as a person sees them: the collapsed header names the target, a long result
starts collapsed, and Copy copies the whole result."""

from __future__ import annotations

from testkit.model_server import text_reply, tool_reply
from tests.e2e.conftest import send, sign_in, wait_idle


def run_in_new_conversation(new_context, prompt: str):
    """alice, with the clipboard allowed, sends ``prompt`` in a new conversation and waits
    for its run to end."""
    context = new_context()
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = sign_in(context, "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, prompt)
    wait_idle(page)
    return page


def test_headers_name_targets_long_results_collapse_and_copy_copies_all(new_context, fresh_model):
    body = "".join(f"line {i}\n" for i in range(1, 31))
    fresh_model.enqueue(
        tool_reply(("write", {"path": "notes/long.txt", "content": body}),
                   ("read", {"path": "notes/long.txt", "start_line": 1, "end_line": 30}),
                   ("list_dir", {"path": "notes"})),
        text_reply("Read it."),
    )  # fmt: skip
    page = run_in_new_conversation(new_context, "write and read a long note")
    cards = page.locator("[data-part=tool]")
    headers = [cards.nth(i).locator("summary").first.inner_text() for i in range(3)]
    assert headers[0].startswith("write notes/long.txt")
    assert headers[1].startswith("read notes/long.txt:1-30")
    assert headers[2].startswith("list_dir notes")
    read = cards.nth(1)
    assert read.get_attribute("data-tool-status") == "ok"
    assert not read.locator(".tool-long").evaluate("(el) => el.open")  # starts collapsed
    assert not read.locator(".tool-output").first.is_visible()
    assert "30 lines" in read.locator(".tool-long > summary").inner_text()
    listing = cards.nth(2)
    assert listing.locator(".tool-output").first.is_visible()  # short: open
    assert "long.txt" in listing.locator(".tool-result").inner_text()
    read.locator(".copy-result").click()
    page.wait_for_function(
        "(el) => el.textContent === 'Copied'", arg=read.locator(".copy-result").element_handle()
    )
    copied = page.evaluate("() => navigator.clipboard.readText()")
    assert "line 1\n" in copied and "line 30" in copied
    read.locator(".tool-long > summary").click()
    assert read.locator(".tool-output").first.is_visible()


def test_a_read_result_is_highlighted_by_file_type_and_copies_as_text(new_context, fresh_model):
    source = "import os\n\n\ndef main():\n    return os.getcwd()\n"
    fresh_model.enqueue(
        tool_reply(("write", {"path": "hl/app.py", "content": source}),
                   ("read", {"path": "hl/app.py"}),
                   ("grep", {"pattern": "import", "path": "hl/app.py"})),
        text_reply("Read it."),
    )  # fmt: skip
    page = run_in_new_conversation(new_context, "write and read app.py")
    cards = page.locator("[data-part=tool]")
    read, grep = cards.nth(1), cards.nth(2)
    keyword = read.locator(".tool-code .codehilite .kn").first
    assert keyword.inner_text() == "import" and keyword.is_visible()
    colours = {keyword.evaluate("(el) => getComputedStyle(el).color"),
               read.locator(".tool-code .codehilite .nn").first.evaluate(
                   "(el) => getComputedStyle(el).color")}  # fmt: skip
    assert len(colours) == 2  # keyword and name drawn differently
    assert grep.locator(".codehilite").count() == 0 and grep.locator(".tool-output").is_visible()
    read.locator(".copy-result").click()
    page.wait_for_function(
        "(el) => el.textContent === 'Copied'", arg=read.locator(".copy-result").element_handle()
    )
    assert page.evaluate("() => navigator.clipboard.readText()") == source
    # The same card after a reload (the first load's rendering of it).
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    again = page.locator("[data-part=tool]").nth(1)
    assert again.locator(".tool-code .codehilite .kn").first.inner_text() == "import"
