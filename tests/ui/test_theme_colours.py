"""Both themes' colours, read from the stylesheets: text on each surface it is drawn on
reaches 4.5:1 (3:1 for the focus ring and field borders) in light and in dark, including
states a page check may not meet (alerts, banners, warnings); the highlighting sheet is
what its generator writes, and each of its colours reaches 4.5:1 on its code background."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("pygments_css", REPO / "scripts/pygments_css.py")
pygments_css = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pygments_css)
contrast = pygments_css.contrast

PROPERTY = re.compile(r"--([\w-]+): light-dark\((#[0-9a-fA-F]{3,6}), (#[0-9a-fA-F]{3,6})\)")

# Each text colour and the surfaces the stylesheet draws it on.
TEXT_ON = {
    "text": "bg panel user-bg tool-bg code-bg error-bg warn-bg hover-bg current-bg files-bg "
    "file-text-bg inline-code-bg control-bg pill-bg kbd-bg",
    "dim": "bg panel tool-bg files-bg control-bg user-bg",
    "cyan": "bg panel user-bg files-bg tool-bg control-bg",
    "yellow": "bg panel warn-bg tool-bg files-bg",
    "red": "bg error-bg tool-bg control-bg panel",
    "green": "tool-bg panel",
    "user-text": "user-bg",
    "quote-text": "bg",
    "tool-input-text": "tool-bg",
    "current-text": "current-bg",
}
NON_TEXT_ON = {"focus": "bg panel user-bg tool-bg control-bg", "border-strong": "bg"}


def _full(colour: str) -> str:
    digits = colour.lstrip("#")
    return "#" + ("".join(c * 2 for c in digits) if len(digits) == 3 else digits)


def theme_colours() -> dict[str, tuple[str, str]]:
    css = (REPO / "static" / "harness.css").read_text()
    return {name: (_full(light), _full(dark)) for name, light, dark in PROPERTY.findall(css)}


def pairs(table: dict[str, str]):
    return [(fg, bg) for fg, surfaces in table.items() for bg in surfaces.split()]


@pytest.mark.parametrize("theme", [0, 1], ids=["light", "dark"])
def test_text_reaches_4_5_to_1_on_every_surface_in_both_themes(theme):
    colours = theme_colours()
    low = [
        (fg, bg, round(contrast(colours[fg][theme], colours[bg][theme]), 2))
        for fg, bg in pairs(TEXT_ON)
        if contrast(colours[fg][theme], colours[bg][theme]) < 4.5
    ]
    assert low == []


@pytest.mark.parametrize("theme", [0, 1], ids=["light", "dark"])
def test_focus_rings_and_field_borders_reach_3_to_1(theme):
    colours = theme_colours()
    low = [
        (fg, bg)
        for fg, bg in pairs(NON_TEXT_ON)
        if contrast(colours[fg][theme], colours[bg][theme]) < 3
    ]
    assert low == []


def test_the_highlighting_sheet_is_the_generators_and_readable_in_both_themes():
    sheet = (REPO / "static" / "pygments.css").read_text()
    assert sheet == pygments_css.stylesheet(), "run scripts/pygments_css.py"
    light_bg, dark_bg = pygments_css.LIGHT[1], pygments_css.DARK[1]
    colours = re.findall(r"\.codehilite \.\w+ \{ color: light-dark\((#\w+), (#\w+)\)", sheet)
    assert len(colours) > 50
    low = [
        (light, dark)
        for light, dark in colours
        if contrast(light, light_bg) < 4.5 or contrast(dark, dark_bg) < 4.5
    ]
    assert low == []
