"""Browser tests: Playwright driving the system Chromium against a live Daphne server."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from testkit.live import LiveServer
from testkit.model_server import ModelServer, echo_fallback

# Debian's build of Chromium's headless shell, of the same release as its browser: what
# Playwright itself runs for headless tests. A page costs it less than half the CPU of the
# full browser's headless mode, most of a browser test's time. The full browser runs the
# page as deployed (test_as_deployed.py).
HEADLESS_SHELL = "/usr/bin/chromium-headless-shell"
CHROMIUM = "/usr/bin/chromium"
USERS = ("alice", "bob", "mallory")  # ids 1, 2, 3 in the live database


def pytest_collection_modifyitems(items):
    """Browser tests last: sync Playwright keeps an event loop running in this thread while
    its browser is open, which other tests' asyncio.run() must not meet."""
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
    items.sort(key=lambda item: "/e2e/" in str(item.fspath))


# Per module, not per session: Playwright's sync API runs an event loop in the main thread
# while it is open, and a test file of another directory that an xdist worker runs after
# this one (Django's ORM, asyncio.run) would find that loop running.
@pytest.fixture(scope="module")
def browser():
    yield from launched(HEADLESS_SHELL)


def launched(executable: str):
    """For a module's ``browser`` fixture: ``executable`` launched headless, closed after."""
    if not Path(executable).exists():
        reason = f"{executable} is missing (make test installs it with apt-get when root)"
        if os.environ.get("HARNESS_REQUIRE_SERVICES") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable,
            headless=True,
            args=["--no-sandbox", "--disable-background-networking", "--disable-gpu",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )  # fmt: skip
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def model():
    server = ModelServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def live(tmp_path_factory, model):
    root = tmp_path_factory.mktemp("live")
    bash = "sandbox" if shutil.which("bwrap") else "off"
    server = LiveServer(root, ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=model.url,
                        HARNESS_BASH=bash, HARNESS_RUN_LEASE="3",
                        # many tests share these users: quotas are tested on their own
                        HARNESS_RUNS_PER_MINUTE="1000", HARNESS_CONCURRENT_RUNS="10")  # fmt: skip
    server.start()
    server.create_users(*USERS)
    yield server
    server.stop()


@pytest.fixture
def fresh_model(model):
    model.reset()
    model.fallback = echo_fallback
    yield model
    model.reset()


@pytest.fixture
def new_context(browser, live):
    yield from contexts_on(browser, live)


def serve_with_terminals(root: Path, users: tuple[str, ...], **env: str):
    """For a fixture: a live server whose conversations have terminals (its tmux server
    under ``root/state``), with ``users``; stopped, and its tmux server ended, after."""
    server = LiveServer(root, HARNESS_AGENT_STATE=str(root / "state"), **env)
    server.start()
    server.create_users(*users)
    try:
        yield server
    finally:
        server.stop()
        subprocess.run(["tmux", "-S", str(root / "state" / "tmux.sock"), "kill-server"],
                       capture_output=True)  # fmt: skip


def contexts_on(browser, server):
    """For a fixture: a maker of browser contexts on ``server``, closed after the test."""
    contexts = []

    def make(viewport=None, **options):
        context = browser.new_context(
            base_url=server.url, viewport=viewport or {"width": 1200, "height": 850}, **options
        )
        context.set_default_timeout(15_000)
        contexts.append(context)
        ORIGINS[context] = server.url
        return context

    yield make
    for context in contexts:
        context.close()
        ORIGINS.pop(context, None)


# A session per server and user, signed in once: a test's sign-in reuses it (checking a
# password costs a third of a second of CPU by design) unless it ended (a sign-out, a
# password changed), when the form signs in again. The session holds nothing but the
# sign-in (agent/web: no view stores anything else in it), so tests share no other state.
SESSIONS: dict[tuple[str, str], str] = {}
ORIGINS: dict[object, str] = {}  # the server each context of contexts_on() is on


def sign_in(context, username: str):
    """A page of a new conversation, signed in as ``username``, its socket open."""
    page = context.new_page()
    origin = ORIGINS.get(context)
    if origin is None:  # a context of a test's own: its origin, from its sign-in page
        page.goto("/accounts/login/")
        origin = page.evaluate("location.origin")
    key = (origin, username)
    if key in SESSIONS:
        context.add_cookies([{"name": "sessionid", "value": SESSIONS[key], "url": origin}])
        page.goto("/")
    elif page.url == "about:blank":
        page.goto("/accounts/login/")
    if "/accounts/login/" in page.url:
        page.fill("#id_username", username)
        page.fill("#id_password", f"pw-{username}-1234")
        page.click("button[type=submit]")
    page.wait_for_selector("body[data-ws=open]")
    cookies = {c["name"]: c["value"] for c in context.cookies(origin)}
    SESSIONS[key] = cookies["sessionid"]
    return page


def wait_until_asked(page, held: list, what: str) -> None:
    """Until the request a test's route holds was made (``held``: what its handler keeps)."""
    deadline = time.monotonic() + 30
    while not held:  # (a route's handler runs while Playwright waits)
        assert time.monotonic() < deadline, f"{what} was never asked for"
        page.wait_for_timeout(20)


def send(page, text: str) -> None:
    """Type and send a prompt, then wait until its user part is shown (the same frame
    carries the status change, so a following wait_idle cannot see the previous idle)."""
    before = page.locator("#messages [data-part=user]").count()
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")
    page.wait_for_function(
        "n => document.querySelectorAll('#messages [data-part=user]').length > n", arg=before
    )


def wait_idle(page, timeout: float = 20_000, prompted: bool = True) -> None:
    """The status idle, after a prompt was shown (``prompted``) or, for what runs without
    one (Compact context on a new conversation), at all."""
    page.wait_for_function(
        "prompted => document.querySelector('#status').dataset.state === 'idle' && "
        "(!prompted || document.querySelectorAll('#messages [data-part=user]').length > 0)",
        arg=prompted,
        timeout=timeout,
    )


def parts(page) -> list[tuple[str, str, str]]:
    """Each part's kind, seq and text (a prompt's or an answer's without its copy buttons)."""
    return page.eval_on_selector_all(
        "#messages > [data-part]",
        "els => els.map(e => [e.dataset.part, e.dataset.seq,"
        " (e.querySelector(':scope > .md, :scope > .user-text') || e).innerText.trim()])",
    )
