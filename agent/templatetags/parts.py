"""``{% load parts %}``: ``{% part_html part %}``, a transcript part drawn from the per-process
render cache (``agent/ui/part_html.py``), for the conversation in the template's context."""

from __future__ import annotations

from django import template

from agent.ui import part_html as drawn

register = template.Library()


@register.simple_tag(takes_context=True)
def part_html(context, part):
    conversation = context["conversation"]
    return drawn.part_html(part, conversation.id, conversation.project_id)
