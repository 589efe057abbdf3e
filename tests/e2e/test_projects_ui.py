"""Projects in the browser: an empty project made from the sidebar, a conversation in it,
the agent's bash changing a file, the Changes panel showing it (and following the next
change live), a commit from the panel, a push refused with its reason, a comment on a line
sent to the agent, the files restored to before a prompt, Edit asking about the files;
and the panel at phone width."""

from __future__ import annotations

import uuid

import pytest

from testkit.model_server import text_reply, tool_reply
from tests.e2e.conftest import send, sign_in, wait_idle

PHONE = {"width": 390, "height": 844}


def bash(fresh_model, command: str) -> None:
    fresh_model.enqueue(tool_reply(("bash", {"command": command})), text_reply("Done."))


def new_project_conversation(page) -> str:
    """A project made in the sidebar and a conversation started in it: the project's name."""
    name = f"app {uuid.uuid4().hex[:6]}"
    page.click("#new-project > summary")
    page.fill("#project-name", name)
    page.click("#new-project-form button[type=submit]")
    item = page.locator(".project-item", has=page.locator(".project-name", has_text=name))
    item.locator(".project-state", has_text="ready").wait_for()
    before = page.url  # (maybe a project conversation already: the newest one)
    item.locator("[data-new-conversation]").click()
    page.wait_for_url(lambda url: url != before)
    page.wait_for_selector("main[data-project]")
    page.wait_for_selector("body[data-ws=open]")
    return name


def file_text(page, path: str) -> str:
    conversation = page.get_attribute("main", "data-conversation")
    response = page.request.get(f"/c/{conversation}/files/download?path={path}")
    assert response.ok, response.status
    return response.text()


def diff_texts(page, path: str) -> list[str]:
    return page.locator(f".change-file[data-path='{path}'] .diff-text").all_inner_texts()


@pytest.fixture
def project_page(new_context, fresh_model):
    page = sign_in(new_context(), "alice")
    name = new_project_conversation(page)
    return page, name


def test_changes_commit_push_comment_and_restore(project_page, fresh_model):
    page, name = project_page
    badge = page.inner_text("#project-badge")
    assert name in badge and "harness/" in badge
    # The conversation is listed with its project.
    current = page.locator(".conv-item:has(.conv-link.current) .conv-project")
    assert current.inner_text() == name

    bash(fresh_model, "printf 'hello\\n' > notes.txt")
    send(page, "write the notes")
    wait_idle(page)
    line = page.locator("[data-part=checkpoint]:not([hidden])").last
    assert "files changed: 1" in line.inner_text()
    line.locator("summary").click()
    assert line.locator(".checkpoint-files").inner_text().strip() == "notes.txt"

    # The Changes panel: the file, added, with its line.
    page.click("#changes-toggle")
    entry = page.locator(".change-file[data-path='notes.txt']")
    entry.wait_for()
    assert entry.get_attribute("data-status") == "added"
    assert "+1" in entry.locator(".change-adds").inner_text()
    assert "+hello" in diff_texts(page, "notes.txt")

    # Commit from the panel; a push (the empty project has no remote) says why not.
    page.fill("#commit-message", "Add the notes")
    page.click("#commit-button")
    page.wait_for_selector("#commit-status[data-kind=ok]")
    assert page.inner_text("#commit-status").startswith("Committed ")
    page.click("#push-button")
    page.wait_for_selector("#commit-status[data-kind=error]")
    assert page.inner_text("#commit-status").startswith(("Not pushed", "The push", "The remote"))

    # The next prompt changes the file: the open panel follows the checkpoint.
    bash(fresh_model, "printf 'changed\\n' > notes.txt")
    send(page, "change the notes")
    wait_idle(page)
    page.wait_for_function(
        "() => [...document.querySelectorAll(\".change-file[data-path='notes.txt'] .diff-text\")]"
        ".some(e => e.textContent === '+changed')"
    )
    assert file_text(page, "notes.txt") == "changed\n"

    # A comment on the line goes to the agent, quoting path:line.
    fresh_model.enqueue(text_reply("Noted."))
    page.click(".change-file[data-path='notes.txt'] button.diff-ln[data-line='1']")
    page.fill(".line-comment textarea", "Say hello instead")
    before = page.locator("#messages [data-part=user]").count()
    page.press(".line-comment textarea", "Enter")
    page.wait_for_function(
        "n => document.querySelectorAll('#messages [data-part=user]').length > n", arg=before
    )
    comment = page.locator("#messages [data-part=user] .user-text").last.inner_text()
    assert comment.startswith("Comment on `notes.txt:1`") and "Say hello instead" in comment
    wait_idle(page)

    # Restore the files to before the second prompt: the first prompt's file is back.
    page.locator("#changes-close").click()
    second = page.locator("#messages [data-part=user]").nth(1)
    second.get_by_role("button", name="Restore files to before this prompt").click()
    choice = second.locator(".restore-choice")
    assert "kept as a checkpoint" in choice.inner_text()
    choice.get_by_role("button", name="Restore files").click()
    second.locator(".restore-result", has_text="back to before this prompt").wait_for()
    assert file_text(page, "notes.txt") == "hello\n"

    # Edit says what happens to the files, and can be cancelled with nothing sent.
    users = page.locator("#messages [data-part=user]").count()
    second.locator("[data-edit]").click()
    second.locator(".edit-form textarea").fill("change them again")
    second.locator(".edit-form button[type=submit]").click()
    choice = second.locator(".restore-choice")
    assert "the files go back first" in choice.inner_text()
    assert choice.get_by_role("button", name="Keep the files as they are").is_visible()
    page.keyboard.press("Escape")
    assert second.locator(".restore-choice").count() == 0
    assert page.locator("#messages [data-part=user]").count() == users


def test_the_changes_panel_at_phone_width(new_context, fresh_model):
    page = sign_in(new_context(viewport=PHONE), "alice")
    page.click("#menu-toggle")
    new_project_conversation(page)
    long_line = "a fairly long line of text that must scroll inside the diff, not the page"
    bash(fresh_model, f"printf '{long_line}\\n' > wide.txt")
    send(page, "write it")
    wait_idle(page)
    # The everyday controls come before the project's wide badge (it pushed them all off).
    for control in ("#menu-toggle", ".conv-actions > summary", "#share-toggle", "#files-toggle"):
        box = page.locator(control).bounding_box()
        assert box["x"] + box["width"] <= PHONE["width"], control
    assert page.locator("#changes-toggle").bounding_box()["x"] < PHONE["width"]  # in sight
    page.click("#changes-toggle")
    page.wait_for_selector(".change-file[data-path='wide.txt']")
    panel = page.locator("#changes-panel").bounding_box()
    assert panel["x"] >= 0 and panel["x"] + panel["width"] <= PHONE["width"] + 0.5
    for control in ("#commit-button", "#push-button", "#archive-link", "#changes-close"):
        box = page.locator(control).bounding_box()
        assert box and box["x"] + box["width"] <= PHONE["width"] + 0.5, control
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    # Keyboard: Esc closes the panel and gives the focus back to its toggle.
    page.focus("#commit-message")
    page.keyboard.press("Escape")
    assert page.locator("#changes-panel").is_hidden()
    assert page.evaluate("document.activeElement.id") == "changes-toggle"


def test_the_header_stays_one_row_with_the_changes_panel_open(new_context, fresh_model):
    """The demanding-user pass: at 1440 px with the Changes panel open the header wrapped to
    two rows (a project's conversation has its badge and the Changes button more)."""
    page = sign_in(new_context(viewport={"width": 1440, "height": 900}), "alice")
    new_project_conversation(page)
    one_row = page.locator(".chat-head").bounding_box()["height"]
    page.click("#changes-toggle")
    page.wait_for_selector("#changes-panel:not([hidden])")
    assert page.locator(".chat-head").bounding_box()["height"] == one_row
    chat = page.locator(".chat").bounding_box()
    for control in ("#share-toggle", "#files-toggle", "#changes-toggle", "#help-toggle"):
        box = page.locator(control).bounding_box()
        assert box["x"] + box["width"] <= chat["x"] + chat["width"], control
    assert page.eval_on_selector(".chat-head", "h => h.scrollWidth <= h.clientWidth")


# Every control of the header (a direct child drawn): its box, and whether its text is cut.
HEADER_BOXES = """() => [...document.querySelector('.chat-head').children]
  .filter((el) => el.getClientRects().length)
  .map((el) => { const r = el.getBoundingClientRect(); return [el.id || el.className, r.left,
    r.right, el.matches('button') && el.scrollWidth > el.clientWidth]; })"""


@pytest.mark.parametrize("width", [760, 1024, 1100, 1280])
def test_the_header_fits_the_chat_at_every_desktop_width_with_a_panel_open(
    new_context, fresh_model, width
):
    """The demanding-user pass: at 1,100 px (1,024, 1,280 and below) with the Files or the
    Changes panel open the chat kept ~380 px and the header's controls ran past it (at 900
    and below, even with no panel). A project's conversation: its header has the most."""
    page = sign_in(new_context(viewport={"width": 1440, "height": 900}), "alice")
    new_project_conversation(page)
    one_row = page.locator(".chat-head").bounding_box()["height"]
    # Archived: the header has a mark more (it ran past the chat, over the panel).
    page.click(".conv-actions > summary")
    page.click("#archive-form button")
    page.locator("#archived-mark").wait_for(state="visible")
    page.keyboard.press("Escape")
    page.set_viewport_size({"width": width, "height": 900})
    for panel in (None, "files", "changes"):
        if panel:
            page.click(f"#{panel}-toggle")
            page.wait_for_selector(f"#{panel}-panel:not([hidden])")
            box = page.locator(f"#{panel}-panel").bounding_box()
            assert box["width"] >= 240 and box["x"] + box["width"] <= width + 0.5, (panel, box)
        chat = page.locator(".chat").bounding_box()
        assert chat["x"] >= 0 and chat["width"] >= 400, (panel, chat)
        assert page.locator(".chat-head").bounding_box()["height"] == one_row, panel
        start, end = chat["x"] - 0.5, chat["x"] + chat["width"] + 0.5
        for name, left, right, cut in page.evaluate(HEADER_BOXES):
            assert start <= left and right <= end, (panel, name)
            assert not cut, (panel, name)  # a button whole: never squeezed
        assert page.locator(".conv-heading").bounding_box()["width"] >= 40, panel
        assert page.evaluate("document.documentElement.scrollWidth") <= width, panel
        if panel:
            page.click(f"#{panel}-close")
            page.wait_for_selector(f"#{panel}-panel", state="hidden")
    # Closed again: the list is back beside the chat.
    assert page.locator("#sidebar").is_visible()
    if width > 720:  # the search key with a panel over the list: the panel makes way
        page.click("#files-toggle")
        page.wait_for_selector("#files-panel:not([hidden])")
        page.locator("#prompt").blur()
        page.keyboard.press("/")
        page.wait_for_function("document.activeElement && document.activeElement.id === 'search'")
        assert page.locator("#search").is_visible()


def test_a_clone_that_fails_shows_gits_message_without_a_reload(new_context):
    page = sign_in(new_context(), "alice")
    name = f"remote {uuid.uuid4().hex[:6]}"
    page.click("#new-project > summary")
    page.fill("#project-name", name)
    page.fill("#project-url", "http://127.0.0.1:9/nothing.git")  # no egress rule names it
    assert page.inner_text("#project-host") == "127.0.0.1:9"
    assert page.locator("#project-credential").is_visible()
    page.fill("#project-username", "me")
    page.fill("#project-token", "tok-e2e-0123456789")
    page.click("#new-project-form button[type=submit]")
    item = page.locator(".project-item", has=page.locator(".project-name", has_text=name))
    item.locator(".project-state", has_text="failed").wait_for(timeout=30_000)
    assert item.locator(".project-error").inner_text().strip()
    assert page.input_value("#project-token") == ""  # the token is not kept on the page
    assert item.locator("[data-new-conversation]").is_hidden()
    hosts = page.request.get("/api/credentials/git").json()["hosts"]
    assert {"host": "127.0.0.1:9", "username": "me"} in hosts
