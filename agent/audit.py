"""The audit log (issue 15): who signed in or failed to, who made or revoked an API token,
who shared a conversation with whom, whose budget changed. ``record`` is the one way to
write it; the admin lists it, read-only. Nothing secret is ever written: not a password
(Django's failed-sign-in signal already masks it; only the username is kept), not a token
(its prefix only, as the admin shows it).

Who and from where: the caller's ``actor`` and ``request``, else the request being served
(``RequestContextMiddleware`` remembers it here), else nobody (a management command).
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.db.models.signals import post_save, pre_save
from django.dispatch import receiver

from agent.models import ApiToken, AuditEntry, User
from agent.server.logs import current_request

log = logging.getLogger(__name__)
Action = AuditEntry.Action


def _ip(request) -> str | None:
    address = (request.META.get("REMOTE_ADDR") or "") if request is not None else ""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


def _signed_in(request) -> User | None:
    user = getattr(request, "user", None)
    return user if user is not None and user.is_authenticated else None


def record(action: str, *, target: str = "", actor: User | None = None, request=None,
           **details: Any) -> None:  # fmt: skip
    """One line of the log. Never raises: the audit log must not break what it records."""
    request = request if request is not None else current_request.get()
    if actor is None and request is not None:
        actor = _signed_in(request)
    try:
        AuditEntry.objects.create(
            action=action, actor=actor, actor_name=actor.get_username() if actor else "",
            target=str(target)[:300], ip=_ip(request), details=details,
        )  # fmt: skip
    except Exception:
        log.exception("could not write the audit log (%s %s)", action, target)


# How a sign-in was made, when not by a password (the backend Django's login() noted).
VIA = {
    "agent.web.oidc.OIDCBackend": "oidc",
    "agent.web.proxy_auth.TrustedProxyUserBackend": "proxy",
}


@receiver(user_logged_in, dispatch_uid="audit-sign-in")
def _sign_in(sender, request, user, **kwargs) -> None:
    via = VIA.get(getattr(user, "backend", ""))
    record(Action.SIGN_IN, target=user.get_username(), actor=user, request=request,
           **({"via": via} if via else {}))  # fmt: skip


@receiver(user_logged_out, dispatch_uid="audit-sign-out")
def _sign_out(sender, request, user, **kwargs) -> None:
    if user is not None:
        record(Action.SIGN_OUT, target=user.get_username(), actor=user, request=request)


@receiver(user_login_failed, dispatch_uid="audit-sign-in-failed")
def _sign_in_failed(sender, credentials, request=None, **kwargs) -> None:
    if isinstance(credentials, dict) and "remote_user" in credentials:
        return  # the proxy's sign-in records its refusals itself, with the reason
    username = credentials.get("username") if isinstance(credentials, dict) else None
    record(Action.SIGN_IN_FAILED, target=str(username or "")[:150], request=request)


def _locked_out(sender, request=None, username=None, ip_address=None, **kwargs) -> None:
    record(Action.LOCKED_OUT, target=str(username or "")[:150], request=request)


try:  # django-axes' own signal for a lockout
    from axes.signals import user_locked_out

    user_locked_out.connect(_locked_out, dispatch_uid="audit-locked-out")
except ImportError:  # pragma: no cover - axes is a dependency
    pass


@receiver(post_save, sender=ApiToken, dispatch_uid="audit-token-created")
def _token_created(sender, instance: ApiToken, created: bool, **kwargs) -> None:
    if created:
        record(Action.TOKEN_CREATED, target=f"{instance.prefix}… of {instance.user.username}",
               name=instance.name)  # fmt: skip


def tokens_revoked(tokens: list[ApiToken]) -> None:
    for token in tokens:
        record(Action.TOKEN_REVOKED, target=f"{token.prefix}… of {token.user.username}",
               name=token.name)  # fmt: skip


@receiver(pre_save, sender=User, dispatch_uid="audit-budget")
def _budget(sender, instance: User, update_fields=None, raw=False, **kwargs) -> None:
    """A budget set or changed (the admin's user form, the shell): old and new."""
    if raw or instance.pk is None:
        return
    if update_fields is not None and "monthly_budget_usd" not in update_fields:
        return  # (a sign-in's last_login, a prompt history: no query for those)
    before = User.objects.filter(pk=instance.pk).values_list("monthly_budget_usd", flat=True)
    old = before.first()
    new = instance.monthly_budget_usd
    if old != new and not (old is not None and new is not None and float(old) == float(new)):
        record(Action.BUDGET_CHANGED, target=instance.get_username(),
               before=None if old is None else str(old),
               after=None if new is None else str(new))  # fmt: skip
