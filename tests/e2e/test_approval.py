"""Tool approval in the browser (docs/API.md): the select, the pending card, approving
and denying from the page, a reload that still shows the card, and axe-core with a
pending approval in both themes."""

from __future__ import annotations

import json

from testkit.model_server import text_reply, tool_reply
from tests.e2e.conftest import send, sign_in, wait_idle
from tests.e2e.test_a11y import DESKTOP, axe, new_conversation, scheme  # noqa: F401

PENDING = "[data-part=approval][data-approval-state=pending]"
PLACEHOLDER_FITS = """el => {
  const style = getComputedStyle(el);
  const text = document.createElement("canvas").getContext("2d");
  text.font = `${style.fontSize} ${style.fontFamily}`;
  const room = el.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  return text.measureText(el.placeholder).width <= room;
}"""


def asking(page) -> None:
    """A new conversation whose tools ask first (set with the page's select)."""
    new_conversation(page)
    with page.expect_response(lambda r: r.url.endswith("/approval")) as answer:
        page.select_option("#approval", "ask")
    assert answer.value.status == 204


def test_approve_and_deny_from_the_page(new_context, fresh_model):
    fresh_model.enqueue(
        tool_reply(("write", {"path": "from-page.txt", "content": "approved text"})),
        tool_reply(("write", {"path": "denied.txt", "content": "nope"})),
        text_reply("done"),
    )  # fmt: skip
    page = sign_in(new_context(), "alice")
    asking(page)
    send(page, "write two files")
    card = page.locator(PENDING)
    card.wait_for()
    page.wait_for_selector("#status[data-state=waiting_input]")
    assert "approved text" in card.locator(".approval-preview").inner_text()
    assert "approval" in page.locator("#status").inner_text().lower()
    # A reload still shows it, with its controls.
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    page.locator(PENDING).locator("[data-decision=approve]").click()
    page.wait_for_selector("[data-part=approval][data-approval-state=approve]")
    second = page.locator(PENDING)
    second.wait_for()
    # The reason's hint is read whole (the page review: "optional, given to the moc").
    assert second.locator("input[name=reason]").evaluate(PLACEHOLDER_FITS)
    second.locator("input[name=reason]").fill("not this one")
    second.locator("[data-decision=deny]").click()
    page.wait_for_selector("[data-part=approval][data-approval-state=deny]")
    wait_idle(page)
    assert "Denied by alice: not this one" in page.locator("#messages").inner_text()
    # Decided, a card folds its preview away (the tool card shows what ran), in every tab.
    decided = page.locator("[data-part=approval][data-approval-state=approve]")
    assert decided.locator(".approval-preview").is_hidden()
    decided.locator(".approval-detail > summary").click()
    assert "approved text" in decided.locator(".approval-preview").inner_text()
    statuses = page.locator("[data-part=tool]").evaluate_all(
        "cards => cards.map(c => c.dataset.toolStatus)"
    )
    assert statuses == ["ok", "error"]
    sent = fresh_model.bodies[-1]["messages"][-1]["content"][0]
    assert sent["is_error"] and "not this one" in sent["content"]
    assert json.loads(sent["content"])["error"].startswith("denied by the user")
    new_conversation(page)  # the user's newest conversation is left idle for other tests


def test_axe_with_a_pending_approval(new_context, fresh_model, scheme):  # noqa: F811
    fresh_model.enqueue(tool_reply(("edit", {"path": "a.txt", "old_str": "one\ntwo",
                                              "new_str": "one\n2"})), text_reply("ok"))  # fmt: skip
    context = new_context(viewport=DESKTOP, bypass_csp=True, color_scheme=scheme)
    page = sign_in(context, "alice")
    asking(page)
    send(page, "edit it")
    page.wait_for_selector(PENDING)
    assert page.locator(f"{PENDING} .diff-add").count() == 1
    violations = axe(page, "chat, approval pending")
    page.click("#cancel")
    page.wait_for_selector("[data-part=approval][data-approval-state=closed]")
    new_conversation(page)
    assert violations == []


ORDER = """() => Array.from(document.querySelectorAll('#messages > [data-part]'),
  (el) => el.dataset.part === 'tool' ? 'tool ' + el.querySelector('.tool-target').textContent
    : el.dataset.part === 'approval' ? 'asks ' + el.querySelector('.tool-target').textContent
    : el.dataset.part)"""


def test_each_approval_card_sits_right_after_its_own_call_live_and_after_reload(
    new_context, fresh_model
):
    """The demanding-user pass: a turn of two calls showed both cards, then the first
    call's question under the second call's card; decided, the cards stay where they are."""
    fresh_model.enqueue(
        tool_reply(("write", {"path": "one.txt", "content": "1"}),
                   ("write", {"path": "two.txt", "content": "2"})),
        text_reply("both written"),
    )  # fmt: skip
    page = sign_in(new_context(), "alice")
    asking(page)
    send(page, "write two files")
    page.wait_for_selector(PENDING)
    assert page.evaluate(ORDER) == ["user", "tool one.txt", "asks one.txt", "tool two.txt"]
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    assert page.evaluate(ORDER) == ["user", "tool one.txt", "asks one.txt", "tool two.txt"]
    page.locator(PENDING).locator("[data-decision=approve]").click()
    page.wait_for_selector(f"{PENDING} .tool-target >> text=two.txt")
    page.locator(PENDING).locator("[data-decision=approve]").click()
    wait_idle(page)
    decided = ["user", "tool one.txt", "asks one.txt", "tool two.txt", "asks two.txt", "text"]
    assert page.evaluate(ORDER) == decided
    page.reload()
    page.wait_for_selector("body[data-ws=open]")
    assert page.evaluate(ORDER) == decided
    new_conversation(page)
