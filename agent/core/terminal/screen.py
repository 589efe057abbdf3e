"""A tmux pane's screen as the bytes that draw it again on a terminal emulator.

A page that opens (or reconnects to) a terminal first gets this: a reset, the pane's
recent history and its visible rows as tmux holds them (``capture-pane -e``: text with
its colours and attributes), the normal screen under a full-screen program's alternate
one, then the cursor where tmux has it. After it, the page follows the pane's live stream
(agent/core/terminal/stream.py). The text is the pane's, hostile: it only ever reaches
the page's emulator as data.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.core.cli_agents.tmux import Tmux, TmuxError

HISTORY = 500  # lines of scrollback sent with a screen
FORMAT = ("#{pane_width} #{pane_height} #{cursor_x} #{cursor_y} #{alternate_on} #{cursor_flag} "
          "#{keypad_cursor_flag} #{history_size} #{pane_dead}")  # fmt: skip
RESET = "\x1bc"


@dataclass(frozen=True)
class Screen:
    data: str
    cols: int
    rows: int


def _lines(captured: str, rows: int) -> str:
    lines = captured.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return "\r\n".join(lines[-rows:] if rows else lines)


async def size(tmux: Tmux, target: str) -> tuple[int, int] | None:
    try:
        out = (await tmux.run("display-message", "-p", "-t", target,
                              "#{pane_width} #{pane_height}")).split()  # fmt: skip
    except TmuxError:
        return None
    return (int(out[0]), int(out[1])) if len(out) == 2 and all(p.isdigit() for p in out) else None


async def capture(tmux: Tmux, target: str) -> Screen | None:
    """The pane's screen now, or None when it is not there."""
    try:
        fields = (await tmux.run("display-message", "-p", "-t", target, FORMAT)).split()
        if len(fields) != 9 or not all(f.isdigit() for f in fields):
            return None
        cols, rows, x, y, alternate, cursor, keypad, history, _ = map(int, fields)
        base = ["capture-pane", "-p", "-e", "-t", target]
        parts = [RESET]
        if alternate:
            # The normal screen under the full-screen program (tmux's saved grid), then
            # the program's own, so that leaving it shows what was there.
            parts.append(_lines(await tmux.run(*base, "-a", check=False), rows))
            parts.append("\x1b[0m\x1b[?1049h\x1b[H")
        elif history:
            start = -min(history, HISTORY)
            parts.append(_lines(await tmux.run(*base, "-S", str(start), "-E", "-1"), 0))
            parts.append("\x1b[0m\r\n")
        parts.append(_lines(await tmux.run(*base), rows))
        parts.append(f"\x1b[0m\x1b[{y + 1};{x + 1}H")
        parts.append("\x1b[?1h" if keypad else "")
        parts.append("" if cursor else "\x1b[?25l")
    except TmuxError:
        return None
    return Screen("".join(parts), cols, rows)
