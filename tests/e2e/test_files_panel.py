"""The Files panel as a person uses it beside a run: it follows what the agent's tools
write without losing the directory or file the user has open, shows a file highlighted by
its type, and offers it for download."""

from __future__ import annotations

import re
import uuid

from testkit.model_server import text_reply, tool_reply
from tests.e2e.conftest import send, sign_in, wait_idle


def write(fresh_model, path: str, content: str) -> None:
    """The model's next answer: a `write` of ``path``, then a line of text."""
    fresh_model.enqueue(tool_reply(("write", {"path": path, "content": content})))
    fresh_model.enqueue(text_reply("Written."))


def test_the_open_panel_refreshes_in_place_when_a_tool_writes(new_context, fresh_model):
    folder = f"refresh-{uuid.uuid4().hex[:8]}"
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    write(fresh_model, f"{folder}/first.txt", "one\n")
    send(page, "write the first file")
    wait_idle(page)

    # The user opens the panel and goes into the folder.
    page.click("#files-toggle")
    page.click(f"#files-body .entry.dir a:text-is('{folder}/')")
    page.wait_for_selector(f"#files-body[data-path='{folder}']")
    assert page.locator("#files-body .entry.file").all_inner_texts()[0].startswith("first.txt")

    # A tool writes a second file: the listing shows it, still in the folder.
    write(fresh_model, f"{folder}/second.txt", "two\n")
    send(page, "write the second file")
    page.wait_for_selector("#files-body .entry.file a:text-is('second.txt')")
    assert page.get_attribute("#files-body", "data-path") == folder
    wait_idle(page)

    # The user views a Python file; a tool rewrites it: the view shows the new text,
    # highlighted as Python, and the user is still on that file.
    write(fresh_model, f"{folder}/app.py", "import os\n")
    send(page, "write app.py")
    page.wait_for_selector("#files-body .entry.file a:text-is('app.py')")
    wait_idle(page)
    page.click("#files-body .entry.file a:text-is('app.py')")
    page.wait_for_selector(f"#files-body[data-path='{folder}/app.py']")
    assert page.inner_text("#files-body .codehilite .kn") == "import"
    write(fresh_model, f"{folder}/app.py", "import sys\n")
    send(page, "rewrite app.py")
    page.wait_for_function(
        "() => (document.querySelector('#files-body .codehilite') || {}).innerText"
        "?.includes('import sys')"
    )
    assert page.get_attribute("#files-body", "data-path") == f"{folder}/app.py"
    wait_idle(page)


def test_a_closed_panel_is_fresh_when_it_opens_again(new_context, fresh_model):
    name = f"later-{uuid.uuid4().hex[:8]}.txt"
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    page.click("#files-toggle")
    page.wait_for_selector("#files-body")
    page.click("#files-close")
    write(fresh_model, name, "later\n")
    send(page, "write a file while the panel is closed")
    wait_idle(page)
    page.click("#files-toggle")
    page.wait_for_selector(f"#files-body .entry.file a:text-is('{name}')")


def test_a_viewed_file_downloads_as_an_attachment(new_context, fresh_model):
    name = f"download-{uuid.uuid4().hex[:8]}.html"
    page = sign_in(new_context(accept_downloads=True), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    write(fresh_model, name, "<script>alert(1)</script>\n")
    send(page, "write a page")
    wait_idle(page)
    page.click("#files-toggle")
    page.click(f"#files-body .entry.file a:text-is('{name}')")
    page.wait_for_selector(f"#files-body[data-path='{name}']")
    with page.expect_download() as info:
        page.click("#files-body a.download")
    download = info.value
    assert download.suggested_filename == name
    with open(download.path(), "rb") as f:
        assert f.read() == b"<script>alert(1)</script>\n"
    assert page.evaluate("() => typeof window.alert") == "function"  # the page is untouched


def test_the_refresh_keeps_the_users_scroll_in_a_long_file(new_context, fresh_model):
    name = f"long-{uuid.uuid4().hex[:8]}.py"
    body = "".join(f"value_{i} = {i}\n" for i in range(400))
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    write(fresh_model, name, body)
    send(page, "write a long file")
    wait_idle(page)
    page.click("#files-toggle")
    page.click(f"#files-body .entry.file a:text-is('{name}')")
    page.wait_for_selector(f"#files-body[data-path='{name}'] .codehilite")
    scroller = page.evaluate_handle(
        "() => [document.querySelector('#files-panel'), document.querySelector('#files-view')]"
        ".find((el) => el.scrollHeight > el.clientHeight + 100)"
    )
    scroller.evaluate("(el) => { el.scrollTop = 2000; }")
    before = scroller.evaluate("(el) => el.scrollTop")
    assert before > 1000
    write(fresh_model, name, body.replace("value_399 = 399", "value_399 = 'changed'"))
    send(page, "change its last line")
    page.wait_for_function(
        "() => document.querySelector('#files-body .codehilite').innerText.includes('changed')"
    )
    assert page.get_attribute("#files-body", "data-path") == name
    assert scroller.evaluate("(el) => el.scrollTop") == before
    wait_idle(page)


def test_a_late_refresh_never_takes_the_user_back(new_context, fresh_model):
    """The user moves while a refresh is on its way: the refresh of the old place must not
    land over where the user went."""
    folder = f"late-{uuid.uuid4().hex[:8]}"
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    write(fresh_model, f"{folder}/a.txt", "a\n")
    send(page, "write into a folder")
    wait_idle(page)
    page.click("#files-toggle")
    page.click(f"#files-body .entry.dir a:text-is('{folder}/')")
    page.wait_for_selector(f"#files-body[data-path='{folder}']")

    held = []
    place = re.compile(rf"/files/\?path={folder}$")

    def hold(route):
        held.append(route)  # answered later

    page.route(place, hold)
    write(fresh_model, f"{folder}/b.txt", "b\n")
    send(page, "write another")
    for _ in range(100):
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "the panel did not refresh"
    page.click("#files-body .crumbs a:text-is('workspace')")  # the user goes to the root
    page.wait_for_selector("#files-body[data-path='']")
    held[0].continue_()
    page.wait_for_timeout(1000)
    assert page.get_attribute("#files-body", "data-path") == ""
    wait_idle(page)
