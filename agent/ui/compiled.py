"""Templates compiled once per process.

The live-streaming fragments are rendered for every frame of every stream (tens a second
per running prompt), so they skip the loader: ``render`` looks a template up once and
keeps it. Django's cached loader does the same outside ``DEBUG``; this holds in both (so
an edit to one of these templates shows after a restart, as an edit to Python code does).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.template.loader import get_template
from django.utils.safestring import SafeString


@cache
def compiled(name: str) -> Any:
    return get_template(name)


def render(name: str, context: dict[str, Any]) -> SafeString:
    """The template's output: safe markup, as ``render_to_string`` gives it."""
    return compiled(name).render(context)
