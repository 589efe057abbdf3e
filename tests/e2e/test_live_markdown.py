"""The answer renders as markdown while it streams, and does not jump when it completes."""

from __future__ import annotations

from testkit.model_server import text_reply
from tests.e2e.conftest import send, sign_in, wait_idle

ANSWER = (
    "## Steps\n\nHere is the plan:\n- read the **config**\n- fix the `bug`\n\n"
    "| file | lines |\n|------|------:|\n| app.py | 120 |\n\n"
    "```python\nprint('ok')\n```\n\n"
    "All of this " + "is done " * 40 + "now."
)

WATCH = """() => {
  window.liveStates = [];
  new MutationObserver(() => {
    const live = document.querySelector('#live-text');
    if (!live) return;
    window.liveStates.push({
      text: live.innerText,
      height: live.getBoundingClientRect().height,
      tags: ['h2', 'li', 'strong', 'code', 'table', 'pre'].filter(t => live.querySelector(t)),
    });
  }).observe(document.querySelector('#messages'),
              {childList: true, subtree: true, characterData: true});
}"""


def test_the_streaming_answer_is_markdown_and_does_not_jump_when_complete(new_context, fresh_model):
    # Seven seconds of text: even a process so busy that it sends frames at its widest
    # interval (a quarter of a second) shows more than 20 states of it.
    fresh_model.enqueue(text_reply(ANSWER, chunk=5, delay=0.07))
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    page.evaluate(WATCH)
    send(page, "make a plan")
    wait_idle(page)
    states = page.evaluate("window.liveStates")
    assert len(states) > 20  # it streamed, frame by frame
    seen = {tag for state in states for tag in state["tags"]}
    assert seen == {"h2", "li", "strong", "code", "table", "pre"}  # all of it, while streaming
    last = states[-1]
    assert "All of this is done" in last["text"]
    for raw in ("##", "**", "|", "```"):
        assert raw not in last["text"]
    # Once past them, completed constructs never show their syntax again.
    after_table = [s["text"] for s in states if "All of" in s["text"]]
    assert after_table and not any("|" in t or "**" in t or "```" in t for t in after_table)
    final = page.query_selector_all("[data-part=text]")[-1].query_selector(".md")
    assert abs(final.bounding_box()["height"] - last["height"]) <= 2  # no jump at the end
    page.screenshot(path="/tmp/shots/live-markdown-done.png")
