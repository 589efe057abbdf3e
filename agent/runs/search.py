"""Full-text search over the conversations a user may read: their own, those shared with
them and the team's (the access helper's rule: agent/access.py's ``readable_by``).

Prompts and answers are added to ``SearchEntry`` as their events are stored (in the event
log's transaction), and the database's own full-text index answers (migration 0009):
PostgreSQL's ``to_tsvector`` with a GIN index, SQLite's FTS5. A query is words, never the
engine's syntax: on SQLite each word is quoted (the last one a prefix), on PostgreSQL
``websearch_to_tsquery`` reads anything; quotes, operators and brackets cannot make a
query fail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import BooleanField, CharField, FloatField
from django.db.models.expressions import RawSQL
from django.utils.html import escape
from django.utils.safestring import mark_safe

from agent.access import readable_by
from agent.core.events import TextEvent, UserEvent
from agent.models import SearchEntry

INDEXED = (UserEvent.type, TextEvent.type)
MAX_QUERY = 200
LIMIT = 30
START, STOP = "\x02", "\x03"  # around a match in a snippet (the page marks them up)
_WORD = re.compile(r"\w+")


# Markdown's marks, left out of a snippet shown on the page (it reads as the answer shows,
# not as the model typed it): a link or image as its text, emphasis and code marks, the
# markers that start a heading, a quote or a list item.
_MARKUP = (
    (re.compile(r"!?\[([^\]]*)\]\([^)\s]*\)"), r"\1"),
    (re.compile(r"\*\*|__|~~|`+"), ""),
    (re.compile(r"(?m)^[ \t]{0,3}(?:#{1,6}|>|[-*+]|\d+[.)])[ \t]+"), ""),
    (re.compile(r"(?<![\w*])\*(?=\S)|(?<=\S)\*(?![\w*])"), ""),
)


def unmarked(text: str) -> str:
    for pattern, replacement in _MARKUP:
        text = pattern.sub(replacement, text)
    return text


@dataclass(frozen=True)
class Found:
    conversation: str
    seq: int
    snippet: str  # with START / STOP around the matches
    title: str

    @property
    def marked(self) -> str:
        """The snippet for a page: escaped, its matches in ``<mark>``."""
        escaped = escape(unmarked(self.snippet))
        return mark_safe(escaped.replace(START, "<mark>").replace(STOP, "</mark>"))  # noqa: S308

    def plain(self) -> dict[str, Any]:
        text = self.snippet.replace(START, "").replace(STOP, "")
        return {"conversation": self.conversation, "seq": self.seq, "snippet": text}


def index(conversation_id, rows: list[dict[str, Any]]) -> None:
    """Add a stored batch's prompts and answers (inside the event log's transaction)."""
    SearchEntry.objects.bulk_create([
        SearchEntry(conversation_id=conversation_id, seq=row["seq"], text=row["content"])
        for row in rows
        if row["type"] in INDEXED and isinstance(row.get("content"), str) and row["content"].strip()
    ])  # fmt: skip


def _matches(words: list[str]) -> tuple[RawSQL, RawSQL, RawSQL]:
    """The engine's full-text test of a search entry, its rank (lower is better) and its
    snippet: raw SQL, for what the ORM does not say (FTS5; PostgreSQL's expression
    index)."""
    if connection.vendor == "postgresql":
        text = " ".join(words)
        query = "websearch_to_tsquery('simple', %s)"
        vector = "to_tsvector('simple', agent_searchentry.text)"
        options = f"StartSel={START}, StopSel={STOP}, MaxWords=24, MinWords=8, MaxFragments=1"
        return (
            RawSQL(f"{vector} @@ {query}", [text], output_field=BooleanField()),
            RawSQL(f"-ts_rank({vector}, {query})", [text], output_field=FloatField()),
            RawSQL(
                f"ts_headline('simple', agent_searchentry.text, {query}, %s)",
                [text, options],
                output_field=CharField(),
            ),  # fmt: skip
        )
    match = (" ".join(f'"{w}"' for w in words[:-1]) + f' "{words[-1]}"*').strip()
    hit = "agent_searchentry_fts MATCH %s AND agent_searchentry_fts.rowid = agent_searchentry.id"
    return (
        RawSQL("agent_searchentry.id IN (SELECT rowid FROM agent_searchentry_fts "
               "WHERE agent_searchentry_fts MATCH %s)", [match], output_field=BooleanField()),
        RawSQL(f"(SELECT rank FROM agent_searchentry_fts WHERE {hit})", [match],
               output_field=FloatField()),
        RawSQL("(SELECT snippet(agent_searchentry_fts, 0, %s, %s, '…', 16) "
               f"FROM agent_searchentry_fts WHERE {hit})", [START, STOP, match],
               output_field=CharField()),
    )  # fmt: skip


def search(user_id: int, query: str) -> list[Found]:
    """The best matches in the conversations the user may read (agent/access.py's rule),
    newest conversations first among equals; [] for a query without words."""
    words = _WORD.findall(query[:MAX_QUERY])
    if not words:
        return []
    matches, rank, snippet = _matches(words)
    rows = (
        SearchEntry.objects.filter(conversation__in=readable_by(user_id).values("id"))
        .filter(matches)
        .annotate(rank=rank, snippet=snippet)
        .order_by("rank", "-conversation__updated")
        .values_list("conversation_id", "seq", "snippet", "conversation__title")[:LIMIT]
    )
    return [Found(str(c), int(seq), found or "", title or "")
            for c, seq, found, title in rows]  # fmt: skip
