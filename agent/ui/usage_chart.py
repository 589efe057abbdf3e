"""The admin's usage charts and their CSV, drawn on the server.

One bar per user per day, its height proportional to the day's largest figure, its
``<title>`` naming the user, the day and the value (what a pointer shows). Plain SVG with
presentation attributes only: no script, no inline style (the CSP allows neither), no chart
library. Usernames are escaped into the SVG and defused in the CSV (a cell a spreadsheet
would read as a formula gets a leading apostrophe).
"""

from __future__ import annotations

import csv
import datetime
import io
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from django.template.loader import render_to_string
from django.utils.safestring import SafeString

# Distinguishable on light and dark backgrounds; users beyond them reuse the colours.
PALETTE = ("#3b82f6", "#f97316", "#10b981", "#a855f7", "#ef4444", "#eab308", "#06b6d4", "#64748b")

HEIGHT = 200  # the tallest bar, in SVG units
BAR = 6  # one user's bar
GAP = 4  # between days
LEFT, TOP, BOTTOM = 8, 8, 24


@dataclass(frozen=True)
class Row:
    date: datetime.date
    username: str
    cost_usd: Decimal
    input_tokens: int
    output_tokens: int

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def days_back(today: datetime.date, count: int) -> list[datetime.date]:
    return [today - datetime.timedelta(days=n) for n in range(count - 1, -1, -1)]


def chart(rows: list[Row], days: list[datetime.date], metric: str, label: str) -> SafeString:
    """An SVG bar chart of ``metric`` (``cost_usd`` or ``tokens``) per user per day."""
    users = sorted({row.username for row in rows})
    colour = {name: PALETTE[n % len(PALETTE)] for n, name in enumerate(users)}
    slot = max(1, len(users)) * BAR + GAP
    largest = max((getattr(row, metric) for row in rows), default=0)
    top = largest or 1  # (the scale: all bars flat when every figure is zero)
    column = {day: n for n, day in enumerate(days)}
    bars = []
    for row in rows:
        if row.date not in column:
            continue
        value = getattr(row, metric)
        height = round(float(value) / float(top) * HEIGHT, 2)
        shown = f"${value:.4f}" if metric == "cost_usd" else f"{value:,} tokens"
        bars.append({
            "x": LEFT + column[row.date] * slot + users.index(row.username) * BAR,
            "y": TOP + HEIGHT - height, "width": BAR - 1, "height": height,
            "colour": colour[row.username], "user": row.username, "date": row.date.isoformat(),
            "title": f"{row.username} {row.date.isoformat()}: {shown}",
        })  # fmt: skip
    width = LEFT * 2 + len(days) * slot
    # A label a week, counted back from the last day (always labelled): evenly spaced, so
    # two never overlap (every 7th from the first and the last one did, a day apart). Each
    # starts at its day; the last one ends at its day's end instead, inside the chart (it
    # ran past the edge and was cut: "27 N").
    ticks = [{"x": LEFT + n * slot, "y": TOP + HEIGHT + 16, "label": day.strftime("%d %b"),
              "anchor": "start"}
             for n, day in enumerate(days) if (len(days) - 1 - n) % 7 == 0]  # fmt: skip
    if ticks:
        ticks[-1].update(x=LEFT + len(days) * slot, anchor="end")
    return render_to_string("admin/agent/_usage_chart.html", {
        "metric": metric, "label": label, "top": _top(largest, metric),
        "width": width, "height": TOP + HEIGHT + BOTTOM,
        "axis": {"x1": LEFT, "x2": width - LEFT, "y": TOP + HEIGHT},
        "bars": bars, "ticks": ticks,
        "legend": [(user, colour[user]) for user in users],
    })  # fmt: skip


def _top(largest, metric: str) -> str:
    """The caption's figure: the largest bar's, or plainly nothing (the offline demo's calls
    cost nothing; the caption said "top: $1.0000", the scale's stand-in)."""
    if metric == "cost_usd":
        return f"top: ${largest:.4f}" if largest else "no spend in these days"
    return f"top: {largest:,}" if largest else "no tokens in these days"


FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


def cell(text: str) -> str:
    """A text cell a spreadsheet will show as text, never evaluate (OWASP's advice)."""
    return "'" + text if text.startswith(FORMULA_START) else text


def to_csv(rows: Iterable[Row]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(["date", "username", "cost_usd", "input_tokens", "output_tokens"])
    for row in rows:
        writer.writerow([row.date.isoformat(), cell(row.username), f"{row.cost_usd:.6f}",
                         row.input_tokens, row.output_tokens])  # fmt: skip
    return out.getvalue()
