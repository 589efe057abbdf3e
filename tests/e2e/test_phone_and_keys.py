"""On a phone and from the keyboard: drawers that close by a button, Esc or the backdrop and
never cover their toggle, the meter in reach, a prompt placeholder that is not cut off, `?`
and a help button, a help dialog that keeps the focus and fits the screen, menus that close
by Esc or a click elsewhere, an answer's actions each on one line, and focus rings that show."""

from __future__ import annotations

import threading

import pytest

from testkit.model_server import text_reply
from tests.e2e.conftest import send, sign_in, wait_idle

PHONE = {"width": 390, "height": 844}

# Each drawer: its toggle, its close button, whether it is open, and a point on the backdrop.
SIDEBAR_OPEN = """() => {
  const sidebar = document.querySelector('#sidebar');
  const r = sidebar.getBoundingClientRect();
  return getComputedStyle(sidebar).visibility === 'visible' && r.left >= 0 && r.right > 0;
}"""
FILES_OPEN = "() => !document.querySelector('#files-panel').hidden"
DRAWERS = {
    "conversations": ("#menu-toggle", "#sidebar-close", SIDEBAR_OPEN, (375, 600)),
    "files": ("#files-toggle", "#files-close", FILES_OPEN, (15, 600)),
}

UNCOVERED = """sel => {
  const el = document.querySelector(sel);
  const r = el.getBoundingClientRect();
  const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  return r.width > 0 && (hit === el || el.contains(hit));
}"""


def is_open(page, check: str) -> bool:
    page.wait_for_timeout(250)  # the slide
    return page.evaluate(check)


def focused_id(page) -> str:
    return page.evaluate("() => document.activeElement && document.activeElement.id")


@pytest.mark.parametrize("name", DRAWERS)
def test_phone_drawers_close_by_button_escape_and_backdrop(new_context, fresh_model, name):
    toggle, close, check, backdrop = DRAWERS[name]
    page = sign_in(new_context(viewport=PHONE), "alice")
    assert not is_open(page, check)
    for how in ("button", "escape", "backdrop", "toggle"):
        page.click(toggle)
        assert is_open(page, check), how
        assert page.get_attribute(toggle, "aria-expanded") == "true"
        assert page.evaluate(UNCOVERED, toggle), f"{name}: the open drawer covers its toggle"
        assert page.is_visible(close) and page.evaluate(UNCOVERED, close)
        if how == "button":
            page.click(close)
        elif how == "escape":
            page.keyboard.press("Escape")
        elif how == "backdrop":
            assert page.is_visible("#backdrop")
            page.mouse.click(*backdrop)
        else:
            page.click(toggle)
        assert not is_open(page, check), how
        assert page.get_attribute(toggle, "aria-expanded") == "false"
        assert page.is_hidden("#backdrop")
        assert focused_id(page) == toggle[1:], how  # the focus goes back to the toggle
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= PHONE["width"]


def test_one_drawer_at_a_time_on_the_phone(new_context, fresh_model):
    page = sign_in(new_context(viewport=PHONE), "alice")
    page.click("#menu-toggle")
    assert is_open(page, DRAWERS["conversations"][2])
    assert page.evaluate(UNCOVERED, "#files-toggle")
    page.click("#files-toggle")
    assert is_open(page, DRAWERS["files"][2]) and not is_open(page, DRAWERS["conversations"][2])


@pytest.mark.parametrize("first", [None, "files"])
def test_slash_on_a_phone_opens_the_list_at_the_search_box(new_context, fresh_model, first):
    """The tour: with a keyboard on a phone, `/` did nothing (the search box is in the
    conversations drawer), and with the Files drawer open it only closed that."""
    page = sign_in(new_context(viewport=PHONE), "alice")
    page.wait_for_selector("body[data-ws=open]")
    if first:
        page.click(DRAWERS[first][0])
        assert is_open(page, DRAWERS[first][2])
    page.locator("#messages").focus()
    page.keyboard.press("/")
    assert focused_id(page) == "search"
    assert is_open(page, SIDEBAR_OPEN) and not is_open(page, FILES_OPEN)
    page.keyboard.press("Escape")
    assert not is_open(page, SIDEBAR_OPEN)


# The placeholder's text, put in the box as its value, fits without scrolling: what the
# placeholder shows is not cut off.
PLACEHOLDER = """() => {
  const prompt = document.querySelector('#prompt');
  const shown = prompt.placeholder;
  prompt.value = shown;
  const fits = prompt.scrollHeight <= prompt.clientHeight
    && prompt.scrollWidth <= prompt.clientWidth;
  prompt.value = '';
  return {shown, fits};
}"""


@pytest.mark.parametrize("width", [390, 800, 1366])
def test_the_prompt_placeholder_is_fully_visible(new_context, fresh_model, width):
    page = sign_in(new_context(viewport={"width": width, "height": 844}), "alice")
    placeholder = page.evaluate(PLACEHOLDER)
    assert placeholder["fits"], placeholder
    assert placeholder["shown"].startswith("Ask the agent") and "? for help" in placeholder["shown"]
    if width == 1366:
        assert "Shift+Enter" in placeholder["shown"]  # the desktop keeps the whole hint
    page.set_viewport_size({"width": 390, "height": 844})  # a window made narrow follows
    page.wait_for_timeout(100)
    assert page.evaluate(PLACEHOLDER)["fits"]


def test_the_meter_is_shown_on_the_phone(new_context, fresh_model):
    page = sign_in(new_context(viewport=PHONE), "alice")
    assert page.is_visible("#meter")
    box = page.locator("#meter").bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
    assert "$" in page.inner_text("#meter")


def test_question_mark_opens_help_from_an_empty_prompt_only(new_context, fresh_model):
    page = sign_in(new_context(), "alice")
    prompt = page.locator("#prompt")
    prompt.focus()
    page.keyboard.press("?")
    assert page.is_visible("#help") and prompt.input_value() == ""
    page.keyboard.press("Escape")
    assert page.is_hidden("#help") and focused_id(page) == "prompt"
    page.keyboard.type("why?")
    assert page.is_hidden("#help") and prompt.input_value() == "why?"


def test_a_visible_help_button_opens_it_and_the_focus_comes_back(new_context, fresh_model):
    page = sign_in(new_context(), "alice")
    assert page.is_visible("#help-toggle")
    page.click("#help-toggle")
    assert page.is_visible("#help") and focused_id(page) == "help-close"
    page.keyboard.press("Escape")
    assert page.is_hidden("#help") and focused_id(page) == "help-toggle"
    page.click("#help-toggle")
    page.click("#help-close")
    assert page.is_hidden("#help") and focused_id(page) == "help-toggle"


def test_the_help_dialog_keeps_the_focus_inside(new_context, fresh_model):
    page = sign_in(new_context(), "alice")
    page.locator("#prompt").focus()
    page.keyboard.press("F1")
    assert page.is_visible("#help")
    inside = "() => document.querySelector('#help').contains(document.activeElement)"
    for key in ["Tab"] * 4 + ["Shift+Tab"] * 4:
        page.keyboard.press(key)
        assert page.evaluate(inside), key
    # The page behind the dialog cannot be reached meanwhile.
    assert page.evaluate("() => document.querySelector('.app').inert")
    page.keyboard.press("Escape")
    assert focused_id(page) == "prompt"
    assert not page.evaluate("() => document.querySelector('.app').inert")


FOCUS_RING = """() => {
  const el = document.activeElement;
  const style = getComputedStyle(el);
  return {id: el.id || el.getAttribute('aria-label') || el.textContent, style: style.outlineStyle,
          width: parseFloat(style.outlineWidth), color: style.outlineColor,
          visible: el.matches(':focus-visible')};
}"""

CONTRAST = """([fg, bg]) => {
  const rgb = (c) => c.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const lum = (c) => {
    const linear = (v) => (v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    const [r, g, b] = rgb(c).map(linear);
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const [a, b] = [lum(fg), lum(bg)];
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_focus_rings_are_clearly_visible(new_context, fresh_model, scheme):
    context = new_context(viewport={"width": 1366, "height": 850}, color_scheme=scheme)
    page = sign_in(context, "alice")
    page.click(".new-conv")  # a conversation of one prompt and its answer, whatever came before
    page.wait_for_selector("body[data-ws=open]")
    send(page, "focus")
    wait_idle(page)
    background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    page.locator("#cancel").focus()
    seen = []
    for _ in range(14):  # Send, Attach, the prompt, the Preview and Terminal panels, the parts' …
        ring = page.evaluate(FOCUS_RING)
        seen.append(ring["id"])
        assert ring["visible"] and ring["style"] == "solid" and ring["width"] >= 2, ring
        assert page.evaluate(CONTRAST, [ring["color"], background]) >= 3, ring  # WCAG 1.4.11
        page.keyboard.press("Shift+Tab")
    assert seen[:13] == [
        "cancel", "attach", "prompt", "Preview", "Terminal",
        "Regenerate (this answer, as a new version)", "Copy as markdown (this answer)",
        "Copy (this answer)",
        "Edit (this prompt, as a new version)", "Copy (this prompt)", "messages",
        "help-toggle", "files-toggle",
    ]  # fmt: skip


def test_the_send_and_stop_button_text_has_contrast(new_context, fresh_model):
    page = sign_in(new_context(), "alice")
    colours = page.evaluate(
        "() => { const s = getComputedStyle(document.querySelector('#cancel'));"
        " return [s.color, s.backgroundColor]; }"
    )
    assert page.evaluate(CONTRAST, colours) >= 4.5


def test_the_phone_header_is_one_row_and_the_title_keeps_its_room(new_context, fresh_model):
    """The first-use review: a three-row header (~135 px) left almost no transcript with
    the keyboard open, and the title was cut to ~150 px at desktop width."""
    page = sign_in(new_context(viewport=PHONE, has_touch=True, is_mobile=True), "alice")
    head = page.locator(".chat-head").bounding_box()
    assert head["height"] <= 56, head
    assert page.locator(".conv-heading").bounding_box()["width"] >= 90
    for control in ("#menu-toggle", "#files-toggle", "#help-toggle"):
        box = page.locator(control).bounding_box()
        assert box["x"] + box["width"] <= PHONE["width"], control
    page.set_viewport_size({"width": 1440, "height": 900})
    page.wait_for_function("() => document.querySelector('.chat-head').offsetHeight < 70")
    assert page.locator(".conv-heading").bounding_box()["width"] >= 300


def test_the_desktop_header_stays_one_row_with_the_files_panel_open(new_context, fresh_model):
    """The demanding-user pass: at 1440 px with the Files panel open the header wrapped to
    two rows; the title gives way (ellipsized), the controls stay whole and in the chat."""
    page = sign_in(new_context(viewport={"width": 1440, "height": 900}), "alice")
    one_row = page.locator(".chat-head").bounding_box()["height"]
    page.click("#files-toggle")
    page.wait_for_selector("#files-panel:not([hidden])")
    assert page.locator(".chat-head").bounding_box()["height"] == one_row
    chat = page.locator(".chat").bounding_box()
    for control in (".conv-actions > summary", "#model", "#thinking", "#approval", "#share-toggle",
                    "#files-toggle", "#help-toggle"):  # fmt: skip
        box = page.locator(control).bounding_box()
        assert box["x"] + box["width"] <= chat["x"] + chat["width"], control
    assert page.locator(".conv-heading").bounding_box()["width"] >= 100
    for button in ("#files-toggle", "#help-toggle"):  # whole: not squeezed
        assert page.eval_on_selector(button, "el => el.scrollWidth <= el.clientWidth"), button


def test_the_phone_header_shows_a_fade_where_more_controls_are(new_context, fresh_model):
    """The demanding-user pass: the phone header's row scrolls sideways with no hint that
    the model, thinking and approval selects are there."""
    page = sign_in(new_context(viewport=PHONE, has_touch=True, is_mobile=True), "alice")
    fade = "([side, shown]) => getComputedStyle(document.querySelector('.chat-head'), side)" \
        ".opacity === (shown ? '1' : '0')"  # fmt: skip
    page.wait_for_function(fade, arg=["::after", True])  # more at the end
    assert page.get_attribute(".chat-head", "data-more") == "end"
    page.wait_for_function(fade, arg=["::before", False])
    page.eval_on_selector(".chat-head", "head => { head.scrollLeft = head.scrollWidth; }")
    page.wait_for_function(fade, arg=["::after", False])
    page.wait_for_function(fade, arg=["::before", True])
    assert page.locator(".chat-head").bounding_box()["height"] <= 56  # the fades take no room


def test_a_touch_control_sends_steering_while_a_prompt_runs(new_context, fresh_model):
    page = sign_in(new_context(viewport=PHONE, has_touch=True, is_mobile=True), "alice")
    page.tap("#menu-toggle")
    page.tap(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    assert page.is_hidden("#steer")  # only while a prompt runs
    answering = threading.Event()  # the answer waits mid-way until the steer is queued
    fresh_model.enqueue(text_reply("streaming slowly " * 20, hold=answering))
    fresh_model.enqueue(text_reply("steered"))
    send(page, "talk slowly")
    page.wait_for_function("() => document.body.classList.contains('running')")
    page.fill("#prompt", "shorter, please")
    page.tap("#steer")
    page.wait_for_selector("#queue .queued[data-mode=steer]")
    assert page.input_value("#prompt") == ""
    answering.set()
    wait_idle(page)
    assert page.is_hidden("#steer")


@pytest.mark.parametrize("viewport", [{"width": 1440, "height": 900}, PHONE])
def test_the_sidebars_rename_fits_the_sidebar(new_context, fresh_model, viewport):
    """The first-use review: the sidebar's Rename button was cut off."""
    page = sign_in(new_context(viewport=viewport), "alice")
    if viewport == PHONE:
        page.click("#menu-toggle")
    page.locator(".conv-item-actions summary").first.click()
    rename = page.locator(".conv-rename button").first
    rename.wait_for()
    right = page.evaluate("() => document.querySelector('#sidebar').getBoundingClientRect().right")
    box = rename.bounding_box()
    assert box["x"] + box["width"] <= right
    assert page.evaluate(UNCOVERED, ".conv-item-actions[open] .conv-rename button")


# Each element's text: how many lines it is drawn on.
LINES = """els => els.map(el => {
  const range = document.createRange();
  range.selectNodeContents(el);
  const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
  return [el.textContent.trim(), tops.size];
})"""


def test_an_answers_actions_are_never_broken_inside_a_word_on_the_phone(new_context, fresh_model):
    """The page review: on a phone the row read "Co|py", "Regene|rate" and "04:37|AM"."""
    page = sign_in(new_context(viewport=PHONE, has_touch=True, is_mobile=True), "alice")
    page.tap("#menu-toggle")
    page.tap(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    fresh_model.enqueue(text_reply("A short answer."))
    send(page, "a prompt")
    wait_idle(page)
    page.wait_for_selector("[data-part=text].answer-end .part-actions .part-time:not(:empty)")
    drawn = page.eval_on_selector_all(
        "[data-part=user] .part-actions > *, [data-part=text].answer-end .part-actions > *", LINES
    )
    shown = [text for text, _ in drawn if text]
    assert {"Copy", "Copy as markdown", "Regenerate", "Edit"} <= set(shown), shown
    assert [text for text, lines in drawn if lines > 1] == []
    # Edit and Regenerate look like the row's other actions (they were full buttons).
    looks = page.eval_on_selector_all(
        "[data-part=text].answer-end .part-actions button",
        "els => els.map(e => getComputedStyle(e).backgroundColor + getComputedStyle(e).fontSize)",
    )
    assert len(set(looks)) == 1, looks


def test_the_help_dialog_fits_the_phone_screen(new_context, fresh_model):
    """The page review: on a phone the help was taller than the screen, its title and its
    Close out of reach."""
    page = sign_in(new_context(viewport=PHONE, has_touch=True, is_mobile=True), "alice")
    page.tap("#help-toggle")
    box = page.locator(".help-box").bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= PHONE["height"], box
    page.locator("#help-close").scroll_into_view_if_needed()
    assert page.evaluate(UNCOVERED, "#help-close")
    page.tap("#help-close")
    assert page.is_hidden("#help")


MENUS = {
    "conversation": (".conv-actions", ".conv-actions > summary"),
    "share": ("#share", "#share-toggle"),
    "listed conversation": (".conv-item-actions", ".conv-item-actions > summary"),
}


@pytest.mark.parametrize("name", MENUS)
def test_escape_and_a_click_elsewhere_close_a_menu(new_context, fresh_model, name):
    menu, summary = MENUS[name]
    page = sign_in(new_context(viewport={"width": 1440, "height": 900}), "alice")
    is_open = f"() => document.querySelector('{menu}').open"
    before = page.locator(summary).first.bounding_box()
    page.locator(summary).first.click()
    assert page.evaluate(is_open)
    assert page.locator(summary).first.bounding_box() == before  # its toggle stays put
    page.keyboard.press("Tab")  # into the menu
    page.keyboard.press("Escape")
    assert not page.evaluate(is_open)
    assert page.evaluate(f"() => document.activeElement === document.querySelector('{summary}')")
    page.locator(summary).first.click()
    page.click("#messages", position={"x": 20, "y": 20})
    assert not page.evaluate(is_open)
    page.locator(summary).first.click()
    page.locator(f"{menu} input[type=text], {menu} input:not([type])").first.click()
    assert page.evaluate(is_open)  # a click inside keeps it


def test_the_instructions_dialog_gives_the_focus_back_to_the_menu(new_context, fresh_model):
    page = sign_in(new_context(), "alice")
    page.click(".conv-actions > summary")
    page.click("#instructions-open")
    page.wait_for_selector("#instructions-dialog[open]")  # (its script comes with the menu)
    assert focused_id(page) == "instructions"
    page.keyboard.press("Escape")
    page.wait_for_function(
        "() => document.activeElement === document.querySelector('.conv-actions > summary')"
    )


def test_the_attach_button_is_drawn_without_an_emoji_font(new_context, fresh_model):
    """The page review: without a colour emoji font (a plain Linux desktop) 📎 was a box."""
    page = sign_in(new_context(), "alice")
    assert page.locator("#attach").inner_text().strip() == ""
    icon = page.locator("#attach svg").bounding_box()
    assert icon["width"] >= 14 and icon["height"] >= 14
    assert page.get_attribute("#attach", "aria-label").startswith("Attach files")


@pytest.mark.parametrize("form", [".rename-form", ".compact-form"])
def test_a_form_that_closes_the_menu_gives_the_focus_back_to_it(new_context, fresh_model, form):
    """The demanding-user pass: Rename and Compact context close the ⋯ menu, and the focus,
    hidden with it, fell to the page's body (Tab started again from the top)."""
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    page.focus(".conv-actions > summary")
    page.keyboard.press("Enter")
    page.focus(f".conv-actions {form} button")
    page.keyboard.press("Enter")
    page.wait_for_selector(".conv-actions .menu-panel", state="hidden")
    assert page.evaluate("() => document.activeElement.matches('.conv-actions > summary')")


@pytest.mark.parametrize(("width", "shown"), [(1024, True), (1440, False), (390, False)])
def test_an_open_panel_says_where_the_list_went(new_context, fresh_model, width, shown):
    """The tour: on a mid-size screen an open Files panel takes the list's place, and
    nothing said where it went. The panel's ☰ brings it back (the panel closes), the focus
    on the conversation's entry; where the list stays (wide) or is a drawer (phone), none."""
    page = sign_in(new_context(viewport={"width": width, "height": 800}), "alice")
    page.wait_for_selector("body[data-ws=open]")
    page.click("#files-toggle")
    back = page.locator("#files-panel .list-back")
    assert back.is_visible() == shown
    if not shown:
        return
    assert page.is_hidden("#sidebar")
    back.click()
    assert page.is_hidden("#files-panel") and page.is_visible("#sidebar")
    assert page.evaluate("() => document.activeElement.matches('#conv-list .conv-link.current')")
