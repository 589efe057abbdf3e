"""The chat page as a deployment serves it (DJANGO_DEBUG=0): its scripts and stylesheets
are the collected copies, hashed and minified (agent/server/staticfiles.py), which no other
browser test runs (they serve the sources, as development does). A minifier that broke a
script (a renamed name it should have kept) shows here as a page error or a page that does
not work. It runs in the full Chromium browser, where the others run its headless shell.
"""

from __future__ import annotations

import re
import secrets
import urllib.request

import pytest

from agent.server.staticfiles import minified
from tests.conftest import REPO
from tests.e2e.conftest import (
    CHROMIUM,
    contexts_on,
    launched,
    send,
    serve_with_terminals,
    sign_in,
    wait_idle,
)

HASHED = re.compile(r"/static/([\w/.-]+?)\.[0-9a-f]{12}\.(js|css)$")


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, model):
    from tests.conftest import require_bwrap

    require_bwrap()
    root = tmp_path_factory.mktemp("deployed")
    yield from serve_with_terminals(
        root,
        ("dora",),
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(60),
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
        DJANGO_SECURE_SSL_REDIRECT="0",  # plain HTTP on loopback: no TLS proxy in front
        DJANGO_HSTS_SECONDS="0",
        ANTHROPIC_API_KEY="test-key",
        ANTHROPIC_BASE_URL=model.url,
    )


@pytest.fixture(scope="module")
def browser():
    """The full browser (the other browser tests run its headless shell)."""
    yield from launched(CHROMIUM)


@pytest.fixture
def context(browser, deployed):
    yield from contexts_on(browser, deployed)


def ours(page) -> list[tuple[str, str]]:
    """(name, URL) of each of our scripts and stylesheets the page fetched."""
    names = page.evaluate("() => performance.getEntriesByType('resource').map(e => e.name)")
    found = []
    for url in names:
        match = HASHED.search(url)
        if match and ".min" not in match[1] and "vendor/" not in match[1]:
            found.append((f"{match[1]}.{match[2]}", url))
    return found


def test_the_minified_scripts_stream_an_answer_and_load_every_panel(context, fresh_model):
    page = sign_in(context(), "dora")
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    send(page, "hello as deployed")
    wait_idle(page)
    page.wait_for_selector("#messages >> text=Echo: hello as deployed")
    # Parts the page's script draws on what arrived: copy buttons, the answer's action row.
    page.wait_for_selector("#messages .part-actions >> text=Regenerate")
    # Scripts that come on demand, each minified too: the uploads' with a first file, the
    # panels' with their panels.
    page.set_input_files(
        "#attach-input",
        files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"as deployed\n"}],
    )
    page.wait_for_function(
        "() => document.querySelector('#prompt').value.includes('uploads/notes.txt')"
    )
    page.click("#terminal-panel > summary")
    page.wait_for_function("() => (document.querySelector('#terminal .xterm-rows') || {})"
                           ".textContent?.includes('/workspace $')", timeout=30_000)  # fmt: skip
    page.click("#preview-panel > summary")
    page.wait_for_function("() => document.querySelector('#preview-status').textContent !== ''")
    page.click("#git-signins > summary")
    page.wait_for_selector("#signin-empty:visible")
    page.click("#new-project > summary")
    page.fill("#project-name", "deployed")
    page.press("#project-name", "Enter")
    page.wait_for_selector("#project-list .project-item .project-name >> text=deployed")
    # The ⋯ menu's Instructions dialog, the help overlay; the files panel (a request of the
    # page's own transport) below.
    page.click(".conv-actions > summary")
    page.click("#instructions-open")
    page.wait_for_selector("#instructions-dialog[open]")
    page.click("#instructions-cancel")
    page.click("#messages")
    page.keyboard.press("?")
    page.wait_for_selector("#help:visible")
    page.keyboard.press("Escape")
    served = dict(ours(page))
    # A conversation in the project: its page brings the Changes panel's script.
    item = page.locator(".project-item", has=page.locator(".project-name", has_text="deployed"))
    item.locator(".project-state", has_text="ready").wait_for()
    item.locator("[data-new-conversation]").click()
    page.wait_for_selector("main[data-project]")
    page.wait_for_selector("body[data-ws=open]")
    page.click("#changes-toggle")
    page.wait_for_function("() => document.querySelector('#changes-summary').textContent.trim()")
    page.click("#files-toggle")
    page.wait_for_selector("#files-body .crumbs")
    served.update(ours(page))
    assert errors == []
    scripts = ("harness", "transport", "uploads", "conversation_menu", "terminal", "preview",
               "projects", "git_signins", "changes")  # fmt: skip
    assert {f"{name}.js" for name in scripts} | {"harness.css"} <= set(served)
    for name, url in served.items():  # each the minified copy of the repository's file
        with urllib.request.urlopen(url, timeout=30) as response:
            body = response.read().decode()
        assert body == minified(name, (REPO / "static" / name).read_text()), name
