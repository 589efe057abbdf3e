"""A person opens the Terminal panel, types into the shell and sees its output drawn by the
terminal emulator (colours from the page's own stylesheet, under the strict CSP); a reload
finds the same screen; someone watching sees it live and cannot type."""

from __future__ import annotations

import subprocess

import pytest

from testkit.live import LiveServer
from tests.e2e.conftest import contexts_on, sign_in

pytestmark = pytest.mark.slow

ROWS = "#terminal .xterm-rows"


@pytest.fixture(scope="module")
def terminal_live(tmp_path_factory):
    from tests.conftest import require_bwrap

    require_bwrap()
    root = tmp_path_factory.mktemp("terminal-e2e")
    server = LiveServer(root, HARNESS_AGENT_STATE=str(root / "state"))
    server.start()
    server.create_users("tara", "walt")
    try:
        yield server
    finally:
        server.stop()
        subprocess.run(["tmux", "-S", str(root / "state" / "tmux.sock"), "kill-server"],
                       capture_output=True)  # fmt: skip


@pytest.fixture
def context(browser, terminal_live):
    yield from contexts_on(browser, terminal_live)


def shows(page, text: str, where: str = ROWS, timeout: float = 30_000) -> None:
    page.wait_for_function("([where, text]) => (document.querySelector(where) || {})"
                           ".textContent?.includes(text)", arg=[where, text],
                           timeout=timeout)  # fmt: skip


def loaded_terminal_assets(page) -> list[str]:
    return page.evaluate("() => performance.getEntriesByType('resource').map(e => e.name)"
                         ".filter(n => /xterm|terminal(\\.[0-9a-f]+)?\\.css/.test(n))")  # fmt: skip


def test_typing_in_the_terminal_panel_runs_the_shell_and_draws_its_output(context, terminal_live):
    page = sign_in(context(), "tara")
    page.wait_for_selector("body[data-ws=open]")
    # The emulator and its stylesheets are fetched when the panel first opens, not before.
    assert loaded_terminal_assets(page) == []
    page.click("#terminal-panel > summary")
    shows(page, "/workspace $")
    assert len(loaded_terminal_assets(page)) == 4
    page.click("#terminal")
    page.keyboard.type("printf '\\033[31m%s\\033[0m\\n' red-$((40+2))")
    page.keyboard.press("Enter")
    shows(page, "red-42")
    # Drawn in colour by this origin's stylesheet (xterm.js's own <style> is refused by the
    # CSP): the palette's red on a span of xterm.js's class.
    colour = page.eval_on_selector_all(
        f"{ROWS} span.xterm-fg-1", "spans => spans.filter(s => s.textContent.includes('red-42'))"
        ".map(s => getComputedStyle(s).color)",
    )  # fmt: skip
    assert colour == ["rgb(204, 0, 0)"]
    # What the shell prints is data for the emulator, never HTML.
    page.keyboard.type("printf '<img src=x onerror=window.pwned=1>%s\\n' shown")
    page.keyboard.press("Enter")
    shows(page, "onerror=window.pwned=1>shown")
    assert page.locator("#terminal img").count() == 0
    assert page.evaluate("() => window.pwned") is None
    # Ctrl+C is the shell's, not the page's (which would cancel a run).
    # (sent once the program runs: a Ctrl-C that comes first flushes the terminal's unread
    # input, the command itself, and the shell drops the line it was reading)
    page.keyboard.type("sh -c 'echo sle\"\"eping; exec sleep 600'")
    page.keyboard.press("Enter")
    shows(page, "sleeping")
    page.keyboard.press("Control+c")
    page.keyboard.type("echo after-$((1+1))")
    page.keyboard.press("Enter")
    shows(page, "after-2")
    # A reload finds the same shell and screen.
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    page.click("#terminal-panel > summary")
    shows(page, "after-2")
    # Someone watching sees the shell live, and cannot type into it.
    conversation = page.url.rstrip("/").rsplit("/", 1)[1]
    terminal_live.manage("shell", "-c", "from agent.models import Conversation; "
                         "from agent.web.sharing import set_member; "
                         f"set_member(Conversation.objects.get(pk='{conversation}'), 'walt', "
                         "'viewer')")  # fmt: skip
    watcher = sign_in(context(), "walt")
    watcher.goto(f"/c/{conversation}/")
    watcher.wait_for_selector("body[data-ws=open]")
    watcher.click("#terminal-panel > summary")
    shows(watcher, "after-2")
    watcher.click("#terminal")
    watcher.keyboard.type("echo watcher-typed")
    watcher.keyboard.press("Enter")
    page.click("#terminal")
    page.keyboard.type("echo owner-$((3*3))")
    page.keyboard.press("Enter")
    shows(watcher, "owner-9")
    assert "watcher-typed" not in page.inner_text(ROWS)
    assert "watcher-typed" not in watcher.inner_text(ROWS)
