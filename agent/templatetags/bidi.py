"""``{% load bidi %}``: the ``bidi_visible`` filter (``agent/ui/bidi.py``), for every place a
template shows a workspace file's name or path, or a tool's input and output."""

from __future__ import annotations

from django import template

from agent.ui.bidi import bidi_visible as _bidi_visible

register = template.Library()


@register.filter(is_safe=True)
def bidi_visible(value):
    """Each bidi control written as ``⟨U+XXXX⟩``. Text stays text (escaped as ever); HTML
    already made safe stays safe, since no character the filter writes is markup."""
    return _bidi_visible(value) if isinstance(value, str) else value
