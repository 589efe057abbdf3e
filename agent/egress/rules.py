"""The rules one user's sandboxes are held to: ``HARNESS_EGRESS_ALLOW`` plus the admin's
``EgressRule`` rows for everyone and for that user (never another user's)."""

from __future__ import annotations

from django.conf import settings

from agent.core.egress_rules import BadRule, Rule, parse_rules


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
    for row in EgressRule.objects.filter(user_id__in=[user_id] if user_id else []) | (
        EgressRule.objects.filter(user__isnull=True)
    ):
        try:
            rules += rules_of(row.host, row.ports)
        except BadRule:
            continue  # the admin refuses such a row; one written around it admits nothing
    return rules


def admits(rules: list[Rule], host: str, port: int) -> bool:
    host = host.lower().strip("[]").removesuffix(".")
    return any(rule.matches(host, port) for rule in rules)
