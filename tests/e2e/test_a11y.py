"""Accessibility (WCAG 2.2 AA): landmarks, the transcript as a log that reads each new part
once, no old error read again on load, and axe-core on every state of the page, in the
light and the dark theme."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest

from testkit.live import LiveServer
from testkit.model_server import HttpError, message_reply, text_reply, tool_reply
from tests.e2e.conftest import contexts_on, send, sign_in, wait_idle

AXE = Path(__file__).parent / "vendor" / "axe-4.14.1.min.js"  # test-only, pinned (README)
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1366, "height": 850}
BLOCKING = ("serious", "critical")

AXE_RUN = """async () => {
  const result = await axe.run(document, {resultTypes: ["violations", "incomplete"]});
  const where = (n) => n.target.join(" ");
  const why = (n) => (n.failureSummary || "").replace(/\\n/g, " ");
  return {
    passes: result.passes.length,
    incomplete: result.incomplete.map((v) => `${v.id} (${v.nodes.map(where).join(", ")})`),
    violations: result.violations.map((v) => ({
      id: v.id, impact: v.impact, help: v.help,
      nodes: v.nodes.map((n) => `${where(n)}: ${why(n)}`),
    })),
  };
}"""


# Each axe test runs in both themes: the accounts follow the system (the default), and the
# context's prefers-color-scheme picks light or dark.
BACKGROUNDS = {"light": "rgb(255, 255, 255)", "dark": "rgb(26, 26, 26)"}


@pytest.fixture(params=sorted(BACKGROUNDS))
def scheme(request):
    return request.param


@pytest.fixture
def axe_context(new_context, scheme):
    """Contexts for axe: the injected script needs the page's CSP bypassed (these tests only)."""
    return lambda viewport=None: new_context(
        viewport=viewport or DESKTOP, bypass_csp=True, color_scheme=scheme
    )


def axe(page, state: str) -> list[dict]:
    """Runs axe-core on the page as it is and prints the summary. Returns the violations:
    none serious or critical is the bar; the pages have none of any impact, and keep it so."""
    scheme = page.evaluate("() => matchMedia('(prefers-color-scheme: dark)').matches")
    scheme = "dark" if scheme else "light"
    background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    assert background == BACKGROUNDS[scheme], f"[{state}] is not in the {scheme} theme"
    state = f"{state}, {scheme}"
    page.add_script_tag(path=str(AXE))
    result = page.evaluate(AXE_RUN)
    impacts = Counter(v["impact"] for v in result["violations"])
    review = ", ".join(result["incomplete"]) or "none"
    print(f"\naxe [{state}]: {result['passes']} rules pass; violations by impact: "
          f"{dict(impacts) or 'none'}; for review: {review}")  # fmt: skip
    for violation in result["violations"]:
        print(f"  {violation['impact']}: {violation['id']} ({violation['help']})")
        for node in violation["nodes"]:
            print(f"    {node}")
    blocking = [v["id"] for v in result["violations"] if v["impact"] in BLOCKING]
    assert blocking == [], f"serious or critical violations [{state}]: {blocking}"
    return result["violations"]


def new_conversation(page) -> None:
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")


def test_axe_on_the_empty_chat(axe_context, fresh_model):
    page = sign_in(axe_context(), "alice")
    new_conversation(page)
    assert axe(page, "chat, empty") == []


def test_axe_on_an_archived_conversation(axe_context, fresh_model):
    page = sign_in(axe_context(), "alice")
    new_conversation(page)
    page.click(".conv-actions > summary")
    page.click("#archive-form button")
    page.wait_for_selector("#archived-mark:not([hidden])")
    violations = axe(page, "chat, archived")
    page.click("#archived-mark button")  # unarchived: other tests' lists as they were
    page.wait_for_selector("#archived-mark[hidden]", state="attached")
    assert violations == []


def test_axe_mid_run(axe_context, fresh_model):
    fresh_model.enqueue(text_reply("streaming **slowly** " * 20, hold=threading.Event()))
    page = sign_in(axe_context(), "alice")
    new_conversation(page)
    send(page, "talk slowly")
    page.wait_for_selector("#live-text")
    page.wait_for_function("() => document.body.classList.contains('running')")
    violations = axe(page, "chat, mid-run")
    assert page.evaluate("() => document.body.classList.contains('running')")  # still streaming
    page.click("#cancel")
    page.wait_for_function("() => document.querySelector('#status').dataset.state === 'error'")
    new_conversation(page)  # the user's newest conversation is left idle for other tests
    assert violations == []


def test_axe_with_queued_prompts_and_then_not_sent_ones(axe_context, fresh_model):
    fresh_model.enqueue(text_reply("streaming **slowly** " * 20, hold=threading.Event()))
    page = sign_in(axe_context(), "alice")
    new_conversation(page)
    send(page, "talk slowly")
    page.wait_for_function("() => document.body.classList.contains('running')")
    for text, key in (("then this", "Enter"), ("no, that", "Alt+Enter")):
        page.fill("#prompt", text)
        page.press("#prompt", key)
        page.wait_for_selector(f"#queue .queued-text:text-is('{text}')")
    queued = axe(page, "chat, prompts queued")
    page.click("#cancel")
    page.wait_for_selector("[data-code=not_sent] >> nth=1", state="attached")
    not_sent = axe(page, "chat, queued prompts not sent")
    page.fill("#prompt", "")
    new_conversation(page)  # the user's newest conversation is left idle for other tests
    assert queued == [] and not_sent == []


def test_axe_with_a_compaction_and_the_context_gauge(axe_context, fresh_model):
    page = sign_in(axe_context(), "alice")
    new_conversation(page)
    for step in ("one", "two", "three"):
        send(page, step)
        wait_idle(page)
    fresh_model.enqueue(message_reply("Three **short** prompts."))
    page.click(".conv-actions summary")
    page.click(".compact-form button")
    page.wait_for_selector("[data-part=compaction]")
    wait_idle(page)
    page.click("[data-part=compaction] summary")  # the summary open
    assert axe(page, "chat, compacted") == []


def test_axe_with_tool_cards(axe_context, fresh_model):
    fresh_model.enqueue(
        tool_reply(("write", {"path": "a.txt", "content": "hello\n"}), ("read", {"path": "a.txt"}),
                   ("read", {"path": "missing.txt"}), text="Writing it."),
        text_reply("Done: `a.txt`.\n\n```python\nprint('ok')\n```"),
    )  # fmt: skip
    page = sign_in(axe_context(), "alice")
    new_conversation(page)
    send(page, "write and read a file")
    wait_idle(page)
    assert page.locator("[data-part=tool]").count() == 3
    page.locator("[data-part=tool] summary").first.click()  # one card open, one in error
    assert axe(page, "chat, tool cards") == []


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_axe_with_highlighted_code_in_a_card_and_the_files_panel(new_context, fresh_model, scheme):
    source = '"""Doc."""\nimport os  # a comment\n\n\ndef main(x: int = 1) -> str:\n' \
             '    return f"{os.sep}{x!r}" + "s" * 2\n'  # fmt: skip
    fresh_model.enqueue(
        tool_reply(("write", {"path": "hl_a11y.py", "content": source}),
                   ("read", {"path": "hl_a11y.py"})),
        text_reply("Done."),
    )  # fmt: skip
    context = new_context(viewport=DESKTOP, bypass_csp=True, color_scheme=scheme)
    page = sign_in(context, "alice")
    new_conversation(page)
    send(page, "write and read a python file")
    wait_idle(page)
    assert page.locator("[data-part=tool] .tool-code .codehilite").count() == 1
    page.click("#files-toggle")
    page.click("#files-body .entry.file a:text-is('hl_a11y.py')")
    page.wait_for_selector("#files-body .file-code .codehilite")
    assert axe(page, f"highlighted code, {scheme}") == []


def test_axe_with_a_prompt_being_edited_and_the_menu_open(axe_context, fresh_model):
    page = sign_in(axe_context(), "alice")
    new_conversation(page)
    send(page, "edit me")
    wait_idle(page)
    page.locator("[data-part=user] [data-edit]").click()
    page.wait_for_selector(".edit-form textarea")
    page.click(".conv-actions > summary")
    page.wait_for_selector(".conv-actions .menu-panel button")
    assert axe(page, "chat, a prompt edited, the menu open") == []


def test_axe_with_the_help_open(axe_context, fresh_model):
    page = sign_in(axe_context(), "alice")
    page.click("#help-toggle")
    assert page.is_visible("#help")
    assert axe(page, "chat, help open") == []


def test_axe_on_the_login_page(axe_context):
    page = axe_context().new_page()
    page.goto("/accounts/login/")
    assert axe(page, "login") == []


@pytest.fixture(scope="module")
def sso_live(tmp_path_factory):
    """A server with single sign-on configured (its provider need not answer: the page is
    what is checked)."""
    provider = "http://127.0.0.1:9/oauth2"
    server = LiveServer(tmp_path_factory.mktemp("sso"), HARNESS_OIDC_CLIENT_ID="harness",
                        HARNESS_OIDC_CLIENT_SECRET="a-test-client-secret-of-some-length",
                        HARNESS_OIDC_AUTHORIZATION_ENDPOINT=f"{provider}/authorize",
                        HARNESS_OIDC_TOKEN_ENDPOINT=f"{provider}/token",
                        HARNESS_OIDC_USERINFO_ENDPOINT=f"{provider}/userinfo",
                        HARNESS_OIDC_JWKS_ENDPOINT=f"{provider}/jwks",
                        HARNESS_OIDC_BUTTON="Example SSO")  # fmt: skip
    server.start()
    yield server
    server.stop()


@pytest.fixture
def sso_context(browser, sso_live):
    yield from contexts_on(browser, sso_live)


def test_axe_on_the_login_page_with_single_sign_on(sso_context, scheme):
    page = sso_context(viewport=DESKTOP, bypass_csp=True, color_scheme=scheme).new_page()
    page.goto("/accounts/login/")
    assert page.get_by_role("link", name="Sign in with Example SSO").is_visible()
    assert axe(page, "login with single sign-on") == []
    page.goto("/oidc/callback/?state=forged&code=x")  # a failed sign-on: its banner
    page.wait_for_selector(".banner[role=alert]")
    assert axe(page, "login after a failed single sign-on") == []


def test_axe_on_the_phone_with_the_drawer_open(axe_context, fresh_model):
    page = sign_in(axe_context(viewport=PHONE), "alice")
    page.click("#menu-toggle")
    page.wait_for_timeout(300)  # the slide
    assert page.is_visible("#sidebar-close")
    assert axe(page, "phone, conversations drawer open") == []
    page.click("#sidebar-close")
    page.click("#files-toggle")
    page.wait_for_selector("#files-view .files")
    assert axe(page, "phone, files panel open") == []


def test_one_main_landmark_and_one_h1_per_page(new_context, fresh_model):
    page = sign_in(new_context(), "bob")
    for path in (page.url, "/files/", "/accounts/login/"):
        if path == "/accounts/login/":
            page.context.clear_cookies()
        page.goto(path)
        assert page.locator("main").count() == 1, path
        assert page.locator("h1").count() == 1, path


def test_the_transcript_is_a_log_busy_while_a_prompt_streams(new_context, fresh_model):
    fresh_model.enqueue(text_reply("word " * 40, hold=threading.Event()))
    page = sign_in(new_context(), "alice")
    new_conversation(page)
    messages = page.locator("#messages")
    assert messages.get_attribute("role") == "log"
    assert messages.get_attribute("aria-live") == "polite"
    assert messages.get_attribute("aria-relevant") == "additions"  # new parts, not each change
    assert messages.get_attribute("aria-busy") == "false"
    send(page, "stream for a while")
    page.wait_for_selector("#live-text")
    page.wait_for_function("() => document.body.classList.contains('running')")
    assert messages.get_attribute("aria-busy") == "true"
    # The block that grows per frame is not announced per frame; its finished part will be.
    assert page.get_attribute("#live-text", "aria-live") == "off"
    page.click("#cancel")
    page.wait_for_function("() => document.querySelector('#status').dataset.state === 'error'")
    assert messages.get_attribute("aria-busy") == "false"
    new_conversation(page)  # the user's newest conversation is left idle for other tests


def test_old_errors_are_not_announced_again_on_load(new_context, fresh_model):
    failed = HttpError(529, "overloaded_error", "Overloaded", {"retry-after-ms": "5"})
    fresh_model.enqueue(failed, failed, failed)
    page = sign_in(new_context(), "bob")
    new_conversation(page)
    send(page, "this one fails")
    page.wait_for_selector("[data-part=error]")
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    assert page.locator("#messages [data-part=error]").count() == 1
    # Inside the log an error is read when it arrives; an alert role would read it again.
    assert page.locator("#messages [role=alert], #messages [aria-live=assertive]").count() == 0
    new_conversation(page)  # the user's newest conversation is left idle for other tests
