"""A transcript part's HTML (``agent/_part.html``), rendered once per process.

A long conversation's page draws its latest 120 parts, and their templates were most of
its time (a 2,000-event conversation, docs/PERFORMANCE.md); a part that has not changed
renders as it did, so the page, a reload, another viewer and "Show earlier messages" reuse
it. The key is everything the templates read: the part's every field (its ``repr``, as
dataclasses of values give it: a tool card's status, an answer's cost, a switch are in it)
and the conversation's id and project, which is all they read of the conversation: they
are rendered with those two alone, so a template that came to read more would show it
empty (tests/ui/test_part_html.py), never another conversation's.
"""

from __future__ import annotations

import hashlib

from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from agent.ui.markdown import RenderCache

_cache = RenderCache(max_chars=16_000_000)


def part_html(part, conversation_id, project_id) -> SafeString:
    """``part`` drawn as the page draws it (autoescaped by its templates: safe)."""
    key = hashlib.blake2b(repr((conversation_id, project_id, part)).encode(),
                          digest_size=20).hexdigest()  # fmt: skip
    html = _cache.get(key)
    if html is None:
        conversation = {"id": conversation_id, "project_id": project_id}
        html = render_to_string("agent/_part.html", {"part": part, "conversation": conversation})
        _cache.put(key, html)
    return mark_safe(html)
