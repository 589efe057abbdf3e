"""The workbench around the transcript, as a person sees it: the offline notice, the
welcome, the sidebar's controls and the model switch."""

from __future__ import annotations

import threading

import pytest

from testkit.live import LiveServer
from testkit.model_server import text_reply
from tests.e2e.conftest import contexts_on, send, sign_in, wait_idle


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A server with no API key: the offline demo model answers."""
    server = LiveServer(tmp_path_factory.mktemp("demo-workbench"), HARNESS_BASH="off")
    server.start()
    server.create_users("dana", "eli")
    yield server
    server.stop()


@pytest.fixture
def demo_context(browser, demo):
    yield from contexts_on(browser, demo)


def test_the_offline_notice_can_be_dismissed_and_stays_dismissed(demo_context):
    page = sign_in(demo_context(), "eli")
    banner = page.locator("#offline-banner")
    assert banner.is_visible() and banner.inner_text().count("scripted") == 1
    page.click("#offline-dismiss")
    assert banner.is_hidden()
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    assert page.locator("#offline-banner").is_hidden()


def test_a_welcome_suggestion_fills_the_prompt_without_sending(demo_context):
    page = sign_in(demo_context(), "dana")
    welcome = page.locator("#welcome")
    assert welcome.is_visible()
    labels = [b.inner_text() for b in welcome.locator("button.suggestion").all()]
    # bash is off on this server: no "run ls -la", which could only fail (nor in the banner)
    assert labels == ["list files", "write hello.py"]
    assert "ls -la" not in page.inner_text("#offline-banner")
    page.click("#welcome >> text=write hello.py")
    assert page.input_value("#prompt") == "write hello.py"
    assert page.evaluate("document.activeElement.id") == "prompt"
    page.wait_for_timeout(300)
    assert page.locator("#messages [data-part]").count() == 0  # filled, not sent
    page.press("#prompt", "Enter")
    page.wait_for_selector("#messages [data-part=user]")
    assert welcome.is_hidden()


def test_conversations_are_renamed_and_deleted_from_the_sidebar(demo_context):
    page = sign_in(demo_context(), "dana")
    here = page.url
    entries = page.locator(".conv-list .conv-item")
    other_id = page.evaluate(
        "() => [...document.querySelectorAll('.conv-item')]"
        ".map(e => e.dataset.conversationId).find(id => !location.pathname.includes(id)) || null"
    )
    if other_id is None:  # make a second conversation, then come back
        page.fill("#prompt", "list files")
        page.press("#prompt", "Enter")
        page.wait_for_selector("#messages [data-part=user]")
        wait_idle(page)  # (deleting a conversation mid-run is another test's subject)
        page.click(".new-conv")
        page.wait_for_selector("body[data-ws=open]")
        here = page.url
        other_id = page.evaluate(
            "() => [...document.querySelectorAll('.conv-item')]"
            ".map(e => e.dataset.conversationId).find(id => !location.pathname.includes(id))"
        )
    entry = page.locator(f".conv-item[data-conversation-id='{other_id}']")
    entry.locator("summary").click()
    entry.locator("input[name=title]").fill("From the sidebar")
    page.fill("#prompt", "half-typed thought")
    heading = page.inner_text("#conv-title")
    entry.locator("button:text('Rename')").click()
    page.wait_for_selector("a.conv-link:text('From the sidebar')")
    assert page.url == here  # the page stays where it was, the list redrawn in place
    assert page.input_value("#prompt") == "half-typed thought"
    assert page.inner_text("#conv-title") == heading  # another one's: this heading stays
    assert page.locator(f"a.conv-link.current[href$='{here.split('/c/')[1]}']").count() == 1
    mine = page.locator(".conv-item:has(a.conv-link.current)")
    mine.locator("summary").click()
    mine.locator("input[name=title]").fill("This one")
    mine.locator("button:text('Rename')").click()  # the page's own: its heading and tab too
    page.wait_for_selector("#conv-title:text-is('This one')")
    assert page.title() == "This one · Harness"
    assert page.input_value("#prompt") == "half-typed thought"
    page.fill("#prompt", "")
    count = entries.count()
    messages = []
    page.once("dialog", lambda dialog: (messages.append(dialog.message), dialog.dismiss()))
    entry = page.locator(f".conv-item[data-conversation-id='{other_id}']")
    entry.locator("summary").click()
    entry.locator("button.danger").click()
    assert messages and "From the sidebar" in messages[0]
    assert entries.count() == count  # dismissed: nothing deleted
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():  # the form posts, and comes back here
        entry.locator("button.danger").click()
    page.wait_for_function("n => document.querySelectorAll('.conv-item').length < n", arg=count)
    page.wait_for_url(here)  # the form's POST redirects back to the page it was deleted from
    assert "From the sidebar" not in page.inner_text(".conv-list")


def test_changing_the_model_keeps_the_page(demo_context):
    page = sign_in(demo_context(), "eli")
    page.fill("#prompt", "half-typed")
    page.evaluate("window.__samePage = true")
    with page.expect_response(lambda r: r.url.endswith("/model")) as answer:
        page.select_option("#model", "claude-opus-4-5")
    assert answer.value.status == 204
    page.wait_for_timeout(200)
    assert page.evaluate("window.__samePage === true")  # no reload
    assert page.input_value("#prompt") == "half-typed"
    assert page.get_attribute("body", "data-ws") == "open"
    page.reload()
    assert page.input_value("#model") == "claude-opus-4-5"


def test_every_part_shows_its_time_on_hover(demo_context):
    page = sign_in(demo_context(), "eli")
    send(page, "list files")
    wait_idle(page)
    page.wait_for_selector("#messages [data-part=tool][data-tool-status=ok]")

    def titles():
        return page.eval_on_selector_all(
            "#messages > [data-part]", "els => els.map(e => [e.dataset.part, e.title])"
        )

    live = titles()
    assert {kind for kind, _ in live} >= {"user", "text", "tool"}
    assert all(title for _, title in live), live
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    assert all(title for _, title in titles())
    assert [kind for kind, _ in titles()] == [kind for kind, _ in live]


def test_the_sidebar_marks_a_running_conversation(new_context, fresh_model):
    answering = threading.Event()  # the answer waits mid-way until both pages saw it run
    fresh_model.enqueue(text_reply("streaming " * 20, hold=answering))
    first = sign_in(new_context(), "alice")  # mallory's newest is test_xss's
    first.click(".new-conv")
    first.wait_for_selector("body[data-ws=open]")
    here = first.url.rstrip("/").rsplit("/", 1)[-1]
    mark = f".conv-item[data-conversation-id='{here}'] .conv-running[aria-label=Running]"
    assert first.locator(mark).count() == 0
    send(first, "talk for a while")
    first.wait_for_selector(mark)  # this page's entry, live
    other = first.context.new_page()  # another page of the same account, loaded mid-run
    other.goto("/files/")
    other.goto(f"/c/{here}/")
    assert other.locator(mark).count() == 1
    answering.set()
    wait_idle(first)
    first.wait_for_selector(mark, state="detached")
