"""A person picks Claude Code for a new conversation in the browser and works with it like
with the built-in agent (docs/API.md): the prompt, a tool card, the answer as markdown,
the CLI's pane live in the terminal emulator (from the first prompt, no reload), idle; the
CLI sandboxed, reaching the model through the gateway."""

from __future__ import annotations

import pytest

from testkit.model_server import ModelServer, echo_fallback, text_reply, tool_reply
from tests.cli_agents import cli_live_server
from tests.e2e.conftest import contexts_on, parts, sign_in
from tests.e2e.test_terminal import STYLE_HASHES, shows

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cli_model():
    server = ModelServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cli_live(tmp_path_factory, cli_model):
    root = tmp_path_factory.mktemp("cli-e2e")
    with cli_live_server(root, cli_model.url, "the-deployments-key") as server:
        yield server


@pytest.fixture
def cli_context(browser, cli_live):
    yield from contexts_on(browser, cli_live)


def test_a_person_picks_claude_code_and_works_with_it_in_the_page(cli_context, cli_model):
    queue = [tool_reply(("Bash", {"command": "echo from-the-cli > made.txt; cat made.txt"}),
                        text="Making it."),
             text_reply("Made **made.txt** for you.")]  # fmt: skip
    cli_model.reset()
    cli_model.fallback = lambda body: (
        queue.pop(0) if body and body.get("tools") and queue else echo_fallback(body)
    )
    page = sign_in(cli_context(), "alice")
    refused = []
    page.on("console", lambda m: "Content Security Policy" in m.text and refused.append(m.text))
    page.select_option("#new-agent", "claude-code")
    page.click("button.new-conv")
    page.wait_for_selector(".agent-badge")
    assert page.inner_text(".agent-badge") == "claude-code"
    page.wait_for_selector("body[data-ws=open]")
    page.fill("#prompt", "make a file")
    page.press("#prompt", "Enter")
    page.wait_for_function(
        "() => document.querySelector('#status').dataset.state === 'idle' && "
        "document.querySelector('#messages [data-part=text] strong')",
        timeout=90_000,
    )
    card = page.locator("#messages [data-part=tool][data-tool-name=Bash]")
    assert card.count() == 1
    assert "from-the-cli" in card.inner_text()
    assert page.locator("#messages [data-part=text] strong").inner_text() == "made.txt"
    kinds = [kind for kind, _, _ in parts(page)]
    assert kinds[0] == "user" and "tool" in kinds and kinds[-1] == "text"
    # The CLI's pane, live in the terminal emulator as a person reads it: its work as
    # text (the tool call, the answer), not the JSON the server parses; nothing of the
    # CLI's making is an element of the page.
    pane = "#agent-pane .xterm-rows"
    page.wait_for_function(
        "(pane) => { const t = document.querySelector(pane)?.textContent || ''; "
        "return t.includes('● Bash') && t.includes('Made **made.txt** for you.'); }", arg=pane,
        timeout=30_000,
    )  # fmt: skip
    assert '{"type"' not in page.inner_text(pane)
    assert page.locator("#agent-pane script, #agent-pane img, #agent-pane a").count() == 0
    # The model was reached through the gateway, with the deployment's key.
    keys = {({k.lower(): v for k, v in r["headers"].items()}).get("x-api-key")
            for r in cli_model.requests}  # fmt: skip
    assert keys == {"the-deployments-key"}
    # A second emulator on the page (the Terminal panel beside the CLI's pane): the texts
    # xterm.js writes for it are allowed by the page's policy too, none refused.
    page.click("#terminal-panel > summary")
    shows(page, "/workspace $")
    from agent.server.middleware import TERMINAL_STYLE_HASHES

    written = set(page.evaluate(STYLE_HASHES))
    assert len(written) >= 5  # the scrollbar's rule, each emulator's cell rule and theme
    assert written - set(TERMINAL_STYLE_HASHES) == set()
    assert refused == []
