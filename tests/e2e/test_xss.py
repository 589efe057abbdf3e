"""Every XSS corpus payload through the model-text path (streamed live, then the stored
page) and the tool-output path, in real Chromium: nothing executes, nothing leaves."""

from __future__ import annotations

from urllib.parse import urlparse

from testkit.model_server import Stream, message_end, message_start, text_block, tool_block
from tests.e2e.conftest import send, sign_in, wait_idle
from tests.xss_corpus import xss_payloads

CHUNK = 100
WATCH = """
window.__fired = [];
for (const name of ['alert', 'confirm', 'prompt', 'print', 'open']) {
  window[name] = (...args) => { window.__fired.push(name); };
}
window.__violations = [];
document.addEventListener('securitypolicyviolation',
  (e) => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));
"""
HAZARDS = """() => {
  const root = document.querySelector('#messages');
  const bad = [];
  for (const el of root.querySelectorAll('*')) {
    const tag = el.tagName.toLowerCase();
    if (['script','iframe','object','embed','svg','math','form','input','base','meta','style',
         'img','video','audio','link','frame','frameset','textarea','button','select']
        .includes(tag) && !el.closest('.code-wrap > button')) {
      // the page's own controls on a part: copy, and Edit / Regenerate / ‹ › (§11)
      const own = el.classList.contains('copy') || el.matches('.part-actions > button.branch-edit, '
        + '.part-actions > button.branch-regenerate, [data-branch-switch] > button');
      if (!(tag === 'button' && own)) bad.push(tag);
    }
    for (const attr of el.attributes) {
      const name = attr.name.toLowerCase();
      if (name.startsWith('on') || name === 'style' || name === 'srcdoc' ||
          (name.startsWith('hx-') && !el.matches('[hx-disable]')) || name.startsWith('ws-'))
        bad.push(tag + '[' + name + ']');
      if ((name === 'href' || name === 'src' || name === 'action' || name === 'formaction') &&
          /^\\s*(javascript|data|vbscript):/i.test(attr.value)) bad.push(tag + '[' + name + ']');
    }
  }
  return bad;
}"""


def test_no_xss_payload_executes_in_model_text_or_tool_output(new_context, fresh_model, live):
    payloads = xss_payloads()
    chunks = [payloads[i : i + CHUNK] for i in range(0, len(payloads), CHUNK)]
    workspace = live.root / "workspaces" / "3"  # mallory
    workspace.mkdir(parents=True, exist_ok=True)
    for n, chunk in enumerate(chunks):
        (workspace / f"payloads-{n}.txt").write_text("\n".join(chunk) + "\n")
    tool_turn = [message_start()]
    for n in range(len(chunks)):
        tool_turn += tool_block(n, "read", {"path": f"payloads-{n}.txt"})
    text_turn = [message_start()]
    for n, chunk in enumerate(chunks):
        text_turn += text_block(n, "\n\n".join(chunk), chunk=400)
    fresh_model.enqueue(
        Stream([*tool_turn, *message_end("tool_use")]), Stream([*text_turn, *message_end()])
    )

    context = new_context()
    context.add_init_script(WATCH)
    page = sign_in(context, "mallory")
    dialogs, outside = [], []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    host = urlparse(live.url).netloc
    page.on(
        "request",
        lambda r: (
            outside.append(r.url)
            if urlparse(r.url).netloc not in (host, "") and not r.url.startswith("data:")
            else None
        ),
    )
    send(page, "render the payloads")
    wait_idle(page, timeout=60_000)

    cards = page.locator("[data-part=tool][data-tool-status=ok]")
    assert cards.count() == len(chunks)
    assert page.locator("[data-part=text]").count() == len(chunks)
    for _ in ("live", "stored"):
        page.wait_for_timeout(500)
        assert page.evaluate("() => window.__fired") == []
        assert page.evaluate("() => window.__violations") == []
        assert page.evaluate(HAZARDS) == []
        assert dialogs == [] and outside == []
        page.reload()
        page.wait_for_selector("body[data-ws=open]")
    assert page.locator("[data-part=text]").count() == len(chunks)
    # The payloads really are on the page, as text.
    assert "<script>alert(1)</script>" in page.inner_text("#messages")
