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


def window(parts: list, before: int | None = None, at: int | None = None) -> tuple[list, Any]:
    """The parts to send: the last ``PAGE`` of those before seq ``before`` (of all when it is
    None), reaching further back to the part at seq ``at`` when that is given (a search
    result's link). Returns them and the seq before which earlier parts remain (None when
    they start the conversation)."""
    if before is not None:
        parts = [part for part in parts if part.seq < before]
    start = max(0, len(parts) - PAGE)
    if at is not None:
        start = min(start, next((i for i, part in enumerate(parts) if part.seq >= at), start))
    shown = parts[start:]
    return shown, (shown[0].seq if start > 0 else None)
