"""The rules one user's sandboxes are held to: ``HARNESS_EGRESS_ALLOW`` plus the admin's
``EgressRule`` rows for everyone and for that user (never another user's)."""

from __future__ import annotations

from django.conf import settings
from django.db.models import Q

from agent.core.egress_rules import BadRule, Rule, parse_rules
from agent.egress import ledger


def rules_of(host: str, ports: str) -> list[Rule]:
    """One admin row as rules: its host with each of its ports (``BadRule`` when either is
    not one)."""
    numbers = [part.strip() for part in (ports or "").split(",") if part.strip()]
    if not numbers:
        raise BadRule("give at least one port")
    if host.strip().startswith("[") or ":" in host:
        raise BadRule(f"{host!r}: give the port in the ports field")
    return [rule for port in numbers for rule in parse_rules(f"{_bracketed(host)}:{port}")]


def _bracketed(host: str) -> str:
    return f"[{host.strip()}]" if ":" in host else host.strip()


def rules_for(user_id: int | None) -> list[Rule]:
    from agent.models import EgressRule

    rules = list(settings.HARNESS_EGRESS_ALLOW)
    rows = EgressRule.objects.filter(Q(user__isnull=True) | Q(user_id=user_id or None))
    for host, ports in rows.values_list("host", "ports"):
        try:
            rules += rules_of(host, ports)
        except BadRule:
            continue  # the admin refuses such a row; one written around it admits nothing
    return rules


def admission(user_id: int | None) -> tuple[list[Rule], int]:
    """What admitting one of the user's connections reads from the database, in one trip
    off the event loop: their rules, and the bytes they moved today."""
    return rules_for(user_id), ledger.used_today(user_id)


def admits(rules: list[Rule], host: str, port: int) -> bool:
    host = host.lower().strip("[]").removesuffix(".")
    return any(rule.matches(host, port) for rule in rules)
