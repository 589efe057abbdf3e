"""static/transport.js, the page's own transport, on a real page: each out-of-band swap style
the templates use, and what it refuses (a request to another site, anything inside
hx-disable, a script in an answer)."""

from __future__ import annotations

import time

from tests.e2e.conftest import sign_in

SCRATCH = """() => {
  const scratch = document.createElement("div");
  scratch.id = "scratch";
  scratch.innerHTML = '<p id="kept">kept</p><ul id="items"><li>one</li></ul>' +
    '<span class="cost" data-answer="7">old</span><span class="cost" data-answer="7">old</span>' +
    '<p id="gone">gone</p><p id="anchor">anchor</p><div id="inner">old inner</div>' +
    '<div id="target"></div>';
  document.querySelector("main.chat").append(scratch);
}"""


def chat(new_context):
    page = sign_in(new_context(), "alice")
    page.wait_for_selector("body[data-ws=open]")
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.evaluate(SCRATCH)
    return page, errors


def test_out_of_band_swaps_each_style_the_templates_use(new_context):
    page, errors = chat(new_context)
    swapped = []
    page.expose_function("swapped", lambda target: swapped.append(target))
    page.evaluate("""() => document.addEventListener("transport:oobAfterSwap",
                         (event) => window.swapped(event.target.id || event.target.className))""")
    page.evaluate("""() => transport.swap(document.getElementById("target"),
      '<p id="kept" hx-swap-oob="true">replaced</p>' +
      '<div hx-swap-oob="beforeend:#items"><li>two</li></div>' +
      '<span hx-swap-oob="outerHTML:.cost[data-answer=\\'7\\']" class="cost" ' +
      'data-answer="7">new</span>' +
      '<div hx-swap-oob="delete:#gone"></div>' +
      '<div hx-swap-oob="afterend:#anchor"><p id="after">after</p></div>' +
      '<div id="inner" hx-swap-oob="innerHTML"><b>new inner</b></div>' +
      'kept text', "innerHTML")""")
    assert page.inner_text("#target") == "kept text"  # the rest went into the target
    assert page.inner_text("#kept") == "replaced"
    assert page.locator("#scratch [hx-swap-oob]").count() == 0
    assert page.locator("#items li").all_inner_texts() == ["one", "two"]
    assert page.locator(".cost").all_inner_texts() == ["new", "new"]  # every match
    assert page.locator("#gone").count() == 0
    assert page.evaluate("document.getElementById('anchor').nextElementSibling.id") == "after"
    assert page.inner_html("#inner") == "<b>new inner</b>"
    assert "inner" in swapped and swapped.count("cost") == 2
    assert errors == []
    with page.expect_console_message(lambda m: "oobErrorNoTarget" in m.text):  # not silent
        page.evaluate("""() => transport.swap(document.getElementById("target"),
                                      '<p id="nowhere" hx-swap-oob="true">x</p>', "innerHTML")""")


def test_an_answer_runs_no_script_and_nothing_inside_hx_disable_is_acted_on(new_context):
    page, _ = chat(new_context)
    asked = []
    page.on("request", lambda request: "/list" in request.url and asked.append(request.url))
    conversation = page.get_attribute("main.chat", "data-conversation")
    page.evaluate(f"""() => transport.swap(document.getElementById("target"),
      '<script>window.ran = true</script>' +
      '<div class="md" hx-disable><a id="quoted" href="#" hx-get="/c/{conversation}/list" ' +
      'hx-trigger="load, click" hx-target="#kept">a link a model wrote</a></div>' +
      '<a id="live-link" href="#" hx-get="/c/{conversation}/list" hx-target="#inner">live</a>',
      "innerHTML")""")
    page.click("#quoted")
    page.wait_for_timeout(300)  # a request it would make has been sent by now
    assert asked == [] and page.evaluate("window.ran") is None
    with page.expect_request(lambda request: "/list" in request.url) as request:
        page.click("#live-link")  # the same markup outside hx-disable does act
    assert request.value.headers.get("hx-request") == "true"
    assert request.value.headers.get("x-csrftoken")  # the page's token (harness.js)


def test_a_request_to_another_site_is_refused(new_context):
    page, _ = chat(new_context)
    asked = []
    page.on("request", lambda request: "example.org" in request.url and asked.append(request.url))
    page.evaluate("""() => transport.swap(document.getElementById("target"),
      '<a id="away" href="#" hx-get="https://example.org/steal" hx-target="#inner">away</a>',
      "innerHTML")""")
    with page.expect_console_message(lambda m: "not this site" in m.text):
        page.click("#away")
    assert asked == []


def test_a_bad_or_quoted_out_of_band_element_changes_nothing_else(new_context):
    """The review: an answer's out-of-band element inside hx-disable (quoted text) was
    swapped; one with a style or selector that does not parse threw, and the rest of the
    answer never swapped; the focused field, replaced out of band, lost the focus."""
    page, errors = chat(new_context)
    page.evaluate("""() => transport.swap(document.getElementById("target"),
      '<div class="md" hx-disable><p id="kept" hx-swap-oob="true">quoted</p></div>' +
      '<div hx-swap-oob="beforebegin:#anchor">bad style</div>' +
      '<div hx-swap-oob="beforeend:#items[">bad selector</div>' +
      '<div id="inner" hx-swap-oob="true">still swapped</div>main', "innerHTML")""")
    assert page.inner_text("#kept") == "kept"
    assert page.inner_text("#inner") == "still swapped"
    assert page.inner_text("#target").endswith("main")
    deadline = time.monotonic() + 5
    while len([e for e in errors if "oobSwapError" in e]) < 2 and time.monotonic() < deadline:
        page.wait_for_timeout(50)  # console messages reach the test a little later
    assert len([e for e in errors if "oobSwapError" in e]) == 2, errors
    page.evaluate("""() => {
      document.getElementById("inner").innerHTML = '<input id="field" value="abcdef">';
      const field = document.getElementById("field");
      field.focus();
      field.setSelectionRange(2, 4);
      transport.swap(document.getElementById("target"),
        '<div id="inner" hx-swap-oob="true"><input id="field" value="abcdef"></div>', "innerHTML");
    }""")
    assert page.evaluate("document.activeElement.id") == "field"
    assert page.evaluate(
        "[document.activeElement.selectionStart, document.activeElement.selectionEnd]"
    ) == [2, 4]


def test_only_the_pages_own_socket_is_opened(new_context):
    page, _ = chat(new_context)
    opened = []
    page.on("websocket", lambda ws: opened.append(ws.url))
    page.evaluate("""() => transport.swap(document.getElementById("target"),
      '<div ws-connect="/ws/c/00000000-0000-0000-0000-000000000000/"></div>' +
      '<div ws-connect="https://example.org/ws/"></div>', "innerHTML")""")
    page.wait_for_timeout(500)  # a socket it would open has been asked for by now
    assert opened == []


def test_what_a_request_sends_is_what_a_form_would(new_context):
    """The review: a control with hx-post inside a form sends the form's fields and its own
    name and value (a button's included); hx-include of an element sends the fields inside
    it as a form would (a checked box, not an unchecked one, nor a submit button)."""
    page, _ = chat(new_context)
    sent = []

    def probe(route):
        sent.append(route.request.post_data)
        route.fulfill(status=204)

    page.route("**/transport-probe", probe)
    page.evaluate("""() => transport.swap(document.getElementById("target"),
      '<div id="extra"><input type="checkbox" name="on" value="yes" checked>' +
      '<input type="checkbox" name="off" value="no"><input type="submit" name="go" value="x">' +
      '<select name="pick"><option>a</option><option selected>b</option></select></div>' +
      '<form><input name="q" value="1"><button type="button" id="probe" name="do" ' +
      'value="remove" hx-post="/transport-probe" hx-include="#extra">Remove</button></form>',
      "innerHTML")""")
    with page.expect_response("**/transport-probe"):
        page.click("#probe")
    assert sent == ["q=1&do=remove&on=yes&pick=b"]
