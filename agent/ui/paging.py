"""The transcript a page is sent: a long conversation's latest parts, earlier ones a page at a
time as the reader scrolls up (``GET /c/<id>/earlier``). Opening a conversation of thousands
of events then costs about what one of a few hundred does: rendering the parts is most of a
page's time, and of its bytes."""

from __future__ import annotations

from typing import Any

PAGE = 120  # parts: a few screens at the top of which the next page is asked for
# Events a page reads back from the end (to the prompt that started a run before them):
# a part is made of one event or more, so usually enough for PAGE parts; when not, the page
# reads the whole conversation.
TAIL_EVENTS = 4 * PAGE


def window(
    parts: list, before: int | None = None, at: int | None = None, size: int = PAGE
) -> tuple[list, Any]:
    """The parts to send: the last ``size`` of those before seq ``before`` (of all when it is
    None), reaching further back to the part at seq ``at`` when that is given (a search
    result's link). Returns them and the seq before which earlier parts remain (None when
    they start the conversation)."""
    if before is not None:
        parts = [part for part in parts if part.seq < before]
    start = max(0, len(parts) - size)
    if at is not None:
        start = min(start, next((i for i, part in enumerate(parts) if part.seq >= at), start))
    # An approval follows its call's card, ahead of later calls' cards (transcript.py), so
    # seqs are not always in order: the page starts where every part before it has a lower
    # seq than every part in it, for the next page (asked for by seq) to hold just the rest.
    lowest_from = [0] * len(parts) + [float("inf")]  # the lowest seq from each index on
    for index in range(len(parts) - 1, -1, -1):
        lowest_from[index] = min(lowest_from[index + 1], parts[index].seq)
    highest_before = [0]  # the highest seq before each index
    for part in parts[:start]:
        highest_before.append(max(highest_before[-1], part.seq))
    while start > 0 and highest_before[start] > lowest_from[start]:
        start -= 1
    shown = parts[start:]
    return shown, (lowest_from[start] if start > 0 else None)
