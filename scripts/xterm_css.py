"""Writes static/terminal.css: the rules xterm.js's DOM renderer would inject as ``<style>``
elements (its colours, its cells, its cursor, its scrollbar), which the page's CSP
(``style-src 'self'``) refuses; a stylesheet of this origin gives them instead.

The palette is xterm.js's default one (the 16 ANSI colours, the 6×6×6 cube and the 24
greys), on a black background; static/terminal.js gives xterm.js the same theme, so both
agree. ``tests/deploy/test_static.py`` checks the file is this script's output.

    .venv/bin/python scripts/xterm_css.py   # rewrites static/terminal.css
"""

from __future__ import annotations

import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "static" / "terminal.css"
ANSI = ["#2e3436", "#cc0000", "#4e9a06", "#c4a000", "#3465a4", "#75507b", "#06989a",
        "#d3d7cf", "#555753", "#ef2929", "#8ae234", "#fce94f", "#729fcf", "#ad7fa8",
        "#34e2e2", "#eeeeec"]  # fmt: skip
FOREGROUND, BACKGROUND, CURSOR, CURSOR_ACCENT = "#ffffff", "#000000", "#ffffff", "#000000"
SELECTION = "rgba(255, 255, 255, 0.3)"
INVERTED = 257  # xterm.js's INVERTED_DEFAULT_COLOR
SCOPE = ".xterm"
# static/terminal.js's fontFamily and fontSize: the renderer measures its cells with them.
FONT_FAMILY, FONT_SIZE = '"DejaVu Sans Mono", ui-monospace, monospace', 13


def palette() -> list[str]:
    steps = [0x00, 0x5F, 0x87, 0xAF, 0xD7, 0xFF]
    cube = [f"#{r:02x}{g:02x}{b:02x}" for r in steps for g in steps for b in steps]
    greys = [f"#{v:02x}{v:02x}{v:02x}" for v in (8 + 10 * i for i in range(24))]
    return ANSI + cube + greys


def _dim(colour: str) -> str:
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, 0.5)"


def css() -> str:
    rows = f"{SCOPE} .xterm-rows"
    out = [
        "/* Made by scripts/xterm_css.py: xterm.js's DOM renderer's own rules (see there). */",
        f"{rows} {{ pointer-events: none; color: {FOREGROUND}; font-family: {FONT_FAMILY}; "
        f"font-size: {FONT_SIZE}px; font-kerning: none; white-space: pre; }}",
        f"{rows} span {{ display: inline-block; height: 100%; vertical-align: top; }}",
        f"{rows} .xterm-dim {{ color: {_dim(FOREGROUND)}; }}",
        f"{SCOPE} span:not(.xterm-bold) {{ font-weight: normal; }}",
        f"{SCOPE} span.xterm-bold {{ font-weight: bold; }}",
        f"{SCOPE} span.xterm-italic {{ font-style: italic; }}",
        "@keyframes xterm-blink-block { 0% { background-color: "
        f"{CURSOR}; color: {CURSOR_ACCENT}; }} 50% {{ background-color: inherit; "
        f"color: {CURSOR}; }} }}",
        f"{rows}.xterm-focus .xterm-cursor.xterm-cursor-blink.xterm-cursor-block "
        "{ animation: xterm-blink-block 1s step-end infinite; }",
        f"{rows} .xterm-cursor.xterm-cursor-block {{ background-color: {CURSOR}; "
        f"color: {CURSOR_ACCENT}; }}",
        f"{rows} .xterm-cursor.xterm-cursor-outline {{ outline: 1px solid {CURSOR}; "
        "outline-offset: -1px; }",
        f"{rows} .xterm-cursor.xterm-cursor-bar {{ box-shadow: 1px 0 0 {CURSOR} inset; }}",
        f"{rows} .xterm-cursor.xterm-cursor-underline {{ border-bottom: 1px {CURSOR}; "
        "border-bottom-style: solid; height: calc(100% - 1px); }",
        f"{SCOPE} .xterm-selection {{ position: absolute; top: 0; left: 0; z-index: 1; "
        "pointer-events: none; }",
        f"{SCOPE}.focus .xterm-selection div, {SCOPE} .xterm-selection div "
        f"{{ position: absolute; background-color: {SELECTION}; }}",
        f"{SCOPE} .xterm-scrollable-element > .scrollbar > .slider "
        "{ background: rgba(121, 121, 121, 0.4); }",
        f"{SCOPE} .xterm-scrollable-element > .scrollbar > .slider:hover "
        "{ background: rgba(100, 100, 100, 0.7); }",
    ]
    for index, colour in enumerate(palette()):
        out.append(f"{rows} .xterm-fg-{index} {{ color: {colour}; }}")
        out.append(f"{rows} .xterm-fg-{index}.xterm-dim {{ color: {_dim(colour)}; }}")
        out.append(f"{rows} .xterm-bg-{index} {{ background-color: {colour}; }}")
    out.append(f"{rows} .xterm-fg-{INVERTED} {{ color: {BACKGROUND}; }}")
    out.append(f"{rows} .xterm-bg-{INVERTED} {{ background-color: {FOREGROUND}; }}")
    return "\n".join(out) + "\n"


def main() -> int:
    OUT.write_text(css())
    return 0


if __name__ == "__main__":
    sys.exit(main())
