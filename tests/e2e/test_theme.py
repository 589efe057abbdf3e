"""Light and dark themes as a person sees them: System follows the browser's
prefers-color-scheme (even as it changes), the switch applies at once without a reload, and
the choice is the account's: after a reload, on another device, and for no one else."""

from __future__ import annotations

import re

from tests.e2e.conftest import sign_in

BACKGROUND = "() => getComputedStyle(document.body).backgroundColor"
LIGHT_BG, DARK_BG = "rgb(255, 255, 255)", "rgb(26, 26, 26)"
PROMPT_BG = "() => getComputedStyle(document.querySelector('#prompt')).backgroundColor"


def test_system_follows_prefers_color_scheme(new_context, fresh_model):
    page = sign_in(new_context(color_scheme="dark"), "alice")
    assert page.get_attribute("html", "data-theme") == "system"
    assert page.is_checked(".theme-switch input[value=system]")
    assert page.evaluate(BACKGROUND) == DARK_BG
    page.emulate_media(color_scheme="light")  # the system changes while the page is open
    assert page.evaluate(BACKGROUND) == LIGHT_BG
    assert page.evaluate(PROMPT_BG) == LIGHT_BG  # controls follow (color-scheme), not only the body
    page.goto("/accounts/login/")  # pages without the app's script too
    assert page.evaluate(BACKGROUND) == LIGHT_BG
    page.emulate_media(color_scheme="dark")
    assert page.evaluate(BACKGROUND) == DARK_BG


def test_the_switch_applies_at_once_and_is_remembered_on_the_account(new_context, fresh_model):
    page = sign_in(new_context(color_scheme="light"), "bob")
    assert page.evaluate(BACKGROUND) == LIGHT_BG
    page.evaluate("() => { window.stillHere = true; }")
    try:
        page.click(".theme-switch label:has(input[value=dark])")
        assert page.evaluate(BACKGROUND) == DARK_BG  # at once
        page.wait_for_selector(".theme-form[data-saved=dark]")
        assert page.evaluate("() => window.stillHere === true")  # no reload
        assert page.evaluate("() => document.body.dataset.ws") == "open"  # the socket stayed

        # The server renders it into the first paint: no flash of the other theme.
        html = page.request.get(page.url).text()
        assert re.search(r'<html lang="en" data-theme="dark">', html)
        page.reload()
        assert page.get_attribute("html", "data-theme") == "dark"
        assert page.evaluate(BACKGROUND) == DARK_BG
        assert page.is_checked(".theme-switch input[value=dark]")

        # Another device of bob's: dark too, though its system is light.
        elsewhere = sign_in(new_context(color_scheme="light"), "bob")
        assert elsewhere.evaluate(BACKGROUND) == DARK_BG
        # Another user's pages are untouched.
        alice = sign_in(new_context(color_scheme="light"), "alice")
        assert alice.get_attribute("html", "data-theme") == "system"
        assert alice.evaluate(BACKGROUND) == LIGHT_BG

        # The keyboard reaches the switch: arrow keys move between the three.
        page.focus(".theme-switch input[value=dark]")
        page.keyboard.press("ArrowRight")  # wraps round to System
        page.wait_for_selector(".theme-form[data-saved=system]")
        assert page.get_attribute("html", "data-theme") == "system"
        assert page.evaluate(BACKGROUND) == LIGHT_BG  # this context's system is light
    finally:
        token = page.input_value(".theme-form [name=csrfmiddlewaretoken]")
        form = {"theme": "system", "csrfmiddlewaretoken": token}
        page.request.post("/account/theme", form=form, headers={"HX-Request": "true"})


def test_an_explicit_light_theme_wins_over_a_dark_system(new_context, fresh_model):
    """(Every page renders the account's theme: tests/web/test_theme.py, the 404 page too.)"""
    page = sign_in(new_context(color_scheme="dark"), "alice")
    try:
        page.click(".theme-switch label:has(input[value=light])")
        page.wait_for_selector(".theme-form[data-saved=light]")
        page.goto("/files/")
        assert page.evaluate(BACKGROUND) == LIGHT_BG
    finally:
        page.goto("/")
        page.click(".theme-switch label:has(input[value=system])")
        page.wait_for_selector(".theme-form[data-saved=system]")
