"""A person opens the Terminal panel, types into the shell and sees its output drawn by the
terminal emulator (colours from the page's own stylesheet, under the strict CSP); a reload
finds the same screen; someone watching sees it live and cannot type."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import contexts_on, send, serve_with_terminals, sign_in, wait_idle

pytestmark = pytest.mark.slow

ROWS = "#terminal .xterm-rows"


@pytest.fixture(scope="module")
def terminal_live(tmp_path_factory):
    from tests.conftest import require_bwrap

    require_bwrap()
    root = tmp_path_factory.mktemp("terminal-e2e")
    yield from serve_with_terminals(root, ("tara", "walt"))


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


def terminal_script_loaded(page) -> bool:
    return page.evaluate(
        "() => performance.getEntriesByType('resource')"
        ".some(e => /\\/terminal(\\.[0-9a-f]+)?\\.js/.test(e.name))"
    )


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
    # Drawn in colour (this origin's stylesheet and xterm.js's own <style>, allowed by hash,
    # agree): the palette's red on a span of xterm.js's class.
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
    # A reload finds the same shell and screen: the terminals' script, fetched only when the
    # panel is first reached (after the socket brought the screen to no one), asks again.
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    assert terminal_script_loaded(page) is False
    page.click("#terminal-panel > summary")
    shows(page, "after-2")
    assert terminal_script_loaded(page) is True
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


TAKE_TERMINAL_FRAMES_FIRST = """() => {
  const target = document.createElement("p");
  target.id = "oob-target";
  target.textContent = "intact";
  document.body.append(target);
  window.markupFrames = 0;
  // Ahead of terminal.js (which cancels its frames): the transport alone decides.
  document.addEventListener("transport:wsBeforeMessage", (event) => {
    if (!event.detail.message.startsWith("{")) return;
    if (event.detail.message.includes("pwned</p>")) window.markupFrames += 1;
    event.stopImmediatePropagation();
  }, true);
}"""


def test_a_panes_output_that_is_markup_is_never_swapped_into_the_page(context):
    """A repository's script prints what looks like a fragment of the server's, addressed
    out of band: its frame is JSON for the terminal, and the page's transport never parses a
    JSON frame as markup, whether or not a terminal script took the frame first."""
    page = sign_in(context(), "tara")
    page.wait_for_selector("body[data-ws=open]")
    page.click("#terminal-panel > summary")
    shows(page, "$")
    page.evaluate(TAKE_TERMINAL_FRAMES_FIRST)
    page.click("#terminal")
    page.keyboard.type("printf '<p id=oob-target hx-swap-oob=true>%s</p>\\n' pwned")
    page.keyboard.press("Enter")
    page.wait_for_function("() => window.markupFrames > 0")
    assert page.inner_text("#oob-target") == "intact"


def test_a_server_started_in_the_terminal_is_shown_in_the_preview_panel(context):
    """On a phone's screen: the Preview panel finds the port, shows the page in its
    sandboxed frame (scripts run, the app's cookies and storage stay out of reach) and
    offers it in a new tab."""
    page = sign_in(context(viewport={"width": 390, "height": 844}, is_mobile=True,
                           has_touch=True), "tara")  # fmt: skip
    page.click("#terminal-panel > summary")
    shows(page, "/workspace $")
    page.click("#terminal")
    page.keyboard.type(
        'printf \'<p id=made>made here</p><script>let r="cookies-readable";'
        'try{document.cookie}catch(e){r="cookies-refused"}document.title=r+":"+origin'
        "</script>' > shown.html; python3 -m http.server 8777 &"
    )
    page.keyboard.press("Enter")
    shows(page, "Serving HTTP")
    page.click("#preview-panel > summary")
    page.wait_for_function("() => document.getElementById('preview-status')"
                           ".textContent.includes('8777')")  # fmt: skip
    page.fill("#preview-port", "8777")
    page.click("#preview-form button[type=submit]")
    frame = page.frame_locator("#preview-frame")
    frame.locator("a", has_text="shown.html").click()  # the directory listing's link
    frame.locator("#made").wait_for()
    inner = next(f for f in page.frames if "/shown.html" in f.url)
    assert "/~" in inner.url  # served at its signed address
    # Its script ran, as an opaque origin that sees no cookie.
    assert inner.evaluate("() => document.title") == "cookies-refused:null"
    width = page.evaluate("() => document.getElementById('preview-frame').offsetWidth")
    assert 300 <= width <= 390
    with page.context.expect_page() as opened:
        page.click("#preview-open")
    tab = opened.value
    tab.wait_for_load_state()
    assert "/~" in tab.url and "Directory listing" in tab.content()


def test_a_server_the_agent_starts_in_the_background_is_shown_from_its_card(context):
    """The demo's `serve` starts a server in the background; its card names the port, and
    "show in the Preview panel" opens the panel on it, the page loaded in the sandboxed
    frame, with the card and the prompt still on a laptop's screen."""
    page = sign_in(context(viewport={"width": 1440, "height": 900}), "tara")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    send(page, "serve python3 -m http.server 8779 --bind 127.0.0.1")
    card = page.locator("#messages .part.tool[data-tool-name=bash]").last
    show = card.get_by_role("button", name="show in the Preview panel")
    show.wait_for(timeout=30_000)
    wait_idle(page)  # (the answer after the card is written, the transcript still)
    assert "Started in the background as job 1." in card.inner_text()
    assert "Listening on port 8779" in card.inner_text()
    show.click()  # (acted on once the panel's script, fetched on this first use, has run)
    page.wait_for_selector("#preview-panel[open] #preview-frame:not([hidden])")
    conversation = page.url.rstrip("/").rsplit("/", 1)[1]
    src = page.get_attribute("#preview-frame", "src")
    assert src == f"/preview/{conversation}/8779/"
    frame = page.frame_locator("#preview-frame")
    frame.get_by_role("heading", name="Directory listing for /").wait_for()
    inner = next(f for f in page.frames if f"/preview/{conversation}/8779/~" in f.url)
    assert "Directory listing" in inner.content()
    # The panel shortened the transcript rather than pushing the prompt off the screen.
    prompt = page.locator("#prompt").bounding_box()
    assert prompt["y"] + prompt["height"] <= 900
    assert page.evaluate("() => scrollY") == 0
    in_sight = show.evaluate("b => { const r = b.getBoundingClientRect(), m = document"
                             ".getElementById('messages').getBoundingClientRect();"
                             " return r.top >= m.top && r.bottom <= m.bottom; }")  # fmt: skip
    assert in_sight


STYLE_HASHES = """() => Promise.all(Array.from(document.querySelectorAll('style'), async (el) => {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(el.textContent));
  return 'sha256-' + btoa(String.fromCharCode(...new Uint8Array(digest)));
}))"""


def test_the_terminal_opens_without_a_csp_violation(context):
    """The demanding-user pass: opening the Terminal logged a CSP violation for each
    <style> xterm.js's DOM renderer writes (and again on every resize). The chat page's
    policy allows exactly those texts by hash: none is refused, no other is allowed."""
    from agent.server.middleware import TERMINAL_STYLE_HASHES

    page = sign_in(context(), "tara")
    refused = []
    page.on("console", lambda m: "Content Security Policy" in m.text and refused.append(m.text))
    page.click("#terminal-panel > summary")
    shows(page, "/workspace $")
    page.set_viewport_size({"width": 900, "height": 700})  # the emulator re-measures
    page.click("#terminal")
    page.keyboard.type("echo resized-$((2*4))")
    page.keyboard.press("Enter")
    shows(page, "resized-8")
    written = set(page.evaluate(STYLE_HASHES))
    assert written - set(TERMINAL_STYLE_HASHES) == set()  # (a new xterm.js: add these)
    assert refused == []
    policy = page.evaluate(
        "() => fetch(location.href).then(r => r.headers.get('content-security-policy'))"
    )
    assert "unsafe-inline" not in policy and "unsafe-hashes" not in policy
