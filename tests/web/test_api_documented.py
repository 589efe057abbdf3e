"""Every URL the server answers, every WebSocket route and every event type is described in
docs/API.md, so that the public interface cannot grow a path nobody can find (the way
tests/ui/test_page_hooks_documented.py holds the page hooks to docs/ARCHITECTURE.md)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from django.urls import URLPattern, URLResolver, get_resolver

from agent.core.events import TYPES
from agent.web.routing import websocket_urlpatterns

REPO = Path(__file__).resolve().parents[2]
# Django's admin is documented as one entry: its own pages are Django's, not ours.
WHOLE = ("admin/",)


def api_doc() -> str:
    return (REPO / "docs" / "API.md").read_text()


def shape(route: str) -> str:
    """A path with every parameter written as ``<>``, so that ``<uuid:conversation_id>``
    in the URLconf and ``<id>`` in the document compare equal; regex routes read like
    ``path()`` ones."""
    route = route.removeprefix("^").removesuffix("$").removesuffix("\\Z")
    route = re.sub(r"\(\?P<\w+>(?:[^()]|\([^()]*\))*\)", "<>", route)
    route = re.sub(r"<[^<>]*>", "<>", route)
    return "/" + route.lstrip("/")


def routes(patterns, prefix: str = "") -> list[str]:
    found = []
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            if route in WHOLE:
                found.append(route)
            else:
                found += routes(entry.url_patterns, route)
        elif isinstance(entry, URLPattern):
            found.append(route)
    return found


def documented_paths() -> set[str]:
    """Every path the document names in code spans (``GET /api/usage``, ``/healthz``…)."""
    paths = set()
    for span in re.findall(r"`([^`\n]+)`", api_doc()):
        for word in span.split():
            word = word.strip(",")
            if word.startswith("/"):
                paths.add(shape(word.split("?")[0]))
    return paths


def test_every_http_path_is_documented():
    served = {shape(r) for r in routes(get_resolver().url_patterns)}
    assert {"/api/conversations/<>/events", "/healthz", "/admin/"} <= served
    assert served - documented_paths() == set()


def test_every_websocket_route_is_documented():
    served = {shape(str(p.pattern)) for p in websocket_urlpatterns}
    assert served == {"/ws/c/<>/"}
    assert served - documented_paths() == set()


def test_every_event_type_is_documented_with_its_fields():
    doc = api_doc()
    start = doc.index("\n## Events")
    section = doc[start : doc.index("\n## ", start + 1)]
    rows = {m[0]: m[1] for m in re.findall(r"^\| `(\w+)` \| ([^|]*) \|", section, re.M)}
    assert set(TYPES) - set(rows) == set()
    for name, cls in TYPES.items():
        fields = {f.name for f in dataclasses.fields(cls)} - {"seq", "timestamp", "branch"}
        assert fields <= set(re.findall(r"`(\w+)`", rows[name])), name


def test_every_management_command_is_documented():
    commands = {p.stem for p in (REPO / "agent" / "management" / "commands").glob("[a-z]*.py")}
    assert {"agent", "create_api_token", "ensure_superuser"} <= commands
    doc = api_doc()
    section = doc[doc.index("\n## Command line") :]
    assert {c for c in commands if f"`{c}" not in section} == set()
