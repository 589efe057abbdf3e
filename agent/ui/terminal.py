"""The live terminal of a CLI agent: ``tmux capture-pane -e`` as safe HTML.

The pane's text is hostile (the CLI prints what the model and the user's files say), so
it is escaped first; of its escape sequences only colours and bold become ``<span>``s with
classes of our own (never a style from the input), every other sequence is dropped; and
the result goes through the sanitizer (nh3) like every other path to HTML.
"""

from __future__ import annotations

import re

import nh3

from agent.ui.compiled import render

MAX_CHARS = 200_000  # of the captured screen and scrollback
_ESCAPES = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b.")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_COLOURS = {30: "black", 31: "red", 32: "green", 33: "yellow", 34: "blue", 35: "magenta",
            36: "cyan", 37: "white"}  # fmt: skip
_cleaner = nh3.Cleaner(tags={"span"}, attributes={"span": {"class"}}, url_schemes=set())


def _classes(codes: list[int], state: dict[str, str | bool]) -> None:
    for code in codes or [0]:
        if code == 0:
            state.clear()
        elif code == 1:
            state["bold"] = True
        elif code == 22:
            state.pop("bold", None)
        elif code in _COLOURS:
            state["fg"] = _COLOURS[code]
        elif 90 <= code <= 97:
            state["fg"] = "bright-" + _COLOURS[code - 60]
        elif code == 39:
            state.pop("fg", None)


def _runs(text: str) -> list[dict[str, str]]:
    """The screen as runs of text, each with the classes its escape sequences gave it (a
    colour or bold starts a run; every other sequence is dropped)."""
    runs = [{"classes": "", "text": ""}]
    state: dict[str, str | bool] = {}
    position = 0
    for match in _ESCAPES.finditer(text):
        runs[-1]["text"] += _CONTROL.sub("", text[position : match.start()])
        position = match.end()
        if match.group(2) != "m" or (match.group(1) or "").startswith("?"):
            continue  # a cursor move, a title, a mode: nothing to show
        codes = [int(c) for c in (match.group(1) or "0").split(";") if c.isdigit() and len(c) < 4]
        _classes(codes, state)
        names = (["t-bold"] if state.get("bold") else []) + (
            [f"t-{state['fg']}"] if state.get("fg") else []
        )
        runs.append({"classes": " ".join(names), "text": ""})
    runs[-1]["text"] += _CONTROL.sub("", text[position:])
    return runs


def ansi_to_html(text: str) -> str:
    screen = render("agent/_terminal_screen.html", {"runs": _runs(text[-MAX_CHARS:])})
    return _cleaner.clean(screen.rstrip())


def terminal_fragment(screen: str, *, oob: bool = False) -> str:
    """The terminal's element (the first page and every push use this one template)."""
    return render("agent/_terminal.html", {"screen": ansi_to_html(screen), "oob": oob})
