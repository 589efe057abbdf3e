"""Full-text search over the conversations a user may read (interfaces §13): their own,
those shared with them and the team's (the access helper's rule, agent/access.py, as SQL).

Prompts and answers are added to ``SearchEntry`` as their events are stored (in the event
log's transaction), and the database's own full-text index answers (migration 0009):
PostgreSQL's ``to_tsvector`` with a GIN index, SQLite's FTS5. A query is words, never the
engine's syntax: on SQLite each word is quoted (the last one a prefix), on PostgreSQL
``websearch_to_tsquery`` reads anything; quotes, operators and brackets cannot make a
query fail.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.utils.html import escape
from django.utils.safestring import mark_safe

from agent.core.events import TextEvent, UserEvent
from agent.models import SearchEntry

INDEXED = (UserEvent.type, TextEvent.type)
MAX_QUERY = 200
LIMIT = 30
START, STOP = "\x02", "\x03"  # around a match in a snippet (the page marks them up)
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Found:
    conversation: str
    seq: int
    snippet: str  # with START / STOP around the matches
    title: str

    @property
    def marked(self) -> str:
        """The snippet for a page: escaped, its matches in ``<mark>``."""
        escaped = escape(self.snippet)
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


# Readable by the caller (%s: their id, twice): as access.readable_by, the owner active.
_READABLE = (
    "(c.owner_id = %s OR c.team OR EXISTS (SELECT 1 FROM agent_membership m "
    "WHERE m.conversation_id = c.id AND m.user_id = %s)) "
    "AND EXISTS (SELECT 1 FROM agent_user o WHERE o.id = c.owner_id AND o.is_active)"
)


def search(user_id: int, query: str) -> list[Found]:
    """The best matches in the conversations the user may read, newest conversations
    first among equals; [] for a query without words."""
    words = _WORD.findall(query[:MAX_QUERY])
    if not words:
        return []
    if connection.vendor == "postgresql":
        sql = (
            "SELECT e.conversation_id, e.seq, ts_headline('simple', e.text, q, %s), c.title "
            "FROM agent_searchentry e JOIN agent_conversation c ON c.id = e.conversation_id, "
            "websearch_to_tsquery('simple', %s) q "
            f"WHERE {_READABLE} AND to_tsvector('simple', e.text) @@ q "
            "ORDER BY ts_rank(to_tsvector('simple', e.text), q) DESC, c.updated DESC LIMIT %s"
        )
        options = f"StartSel={START}, StopSel={STOP}, MaxWords=24, MinWords=8, MaxFragments=1"
        params = [options, " ".join(words), user_id, user_id, LIMIT]
    else:
        match = " ".join(f'"{w}"' for w in words[:-1]) + f' "{words[-1]}"*'
        sql = (
            "SELECT e.conversation_id, e.seq, "
            "snippet(agent_searchentry_fts, 0, %s, %s, '…', 16), c.title "
            "FROM agent_searchentry_fts f JOIN agent_searchentry e ON e.id = f.rowid "
            "JOIN agent_conversation c ON c.id = e.conversation_id "
            f"WHERE agent_searchentry_fts MATCH %s AND {_READABLE} "
            "ORDER BY f.rank, c.updated DESC LIMIT %s"
        )
        params = [START, STOP, match.strip(), user_id, user_id, LIMIT]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    # (SQLite gives a UUID as its 32 hex digits, PostgreSQL as a UUID)
    return [Found(str(uuid.UUID(str(c))), int(seq), snippet or "", title or "")
            for c, seq, snippet, title in rows]  # fmt: skip
