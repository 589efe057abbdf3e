"""API tokens: created once, shown once, stored as SHA-256, checked on every request."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.db.models import QuerySet
from django.utils import timezone

from agent import audit
from agent.access import role_on
from agent.models import ApiToken, User
from agent.web.revocation import notify_token_revoked

PREFIX = "hrn_"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token_value() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def create_token(user: User, name: str = "") -> tuple[ApiToken, str]:
    """A new token for ``user``: the record and the token itself (not stored anywhere)."""
    token = new_token_value()
    record = ApiToken.objects.create(
        user=user, name=name, key_hash=digest(token), prefix=token[: len(PREFIX) + 6]
    )
    return record, token


# last_used is written at most this often per token: the successful path of a request is
# then the one SELECT, not a SELECT and an UPDATE.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def token_for_header(header: str | None) -> ApiToken | None:
    """The unrevoked token of an active user in an ``Authorization: Bearer`` header, with
    its user; one query."""
    if not header or not header.startswith("Bearer "):
        return None
    token = header.removeprefix("Bearer ").strip()
    if not token.startswith(PREFIX) or len(token) > 200:
        return None
    record = (
        ApiToken.objects.select_related("user")
        .filter(key_hash=digest(token), revoked__isnull=True, user__is_active=True)
        .first()
    )
    if record is None:
        return None
    now = timezone.now()
    if record.last_used is None or now - record.last_used >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=record.pk).update(last_used=now)
    return record


def user_for_token(header: str | None) -> User | None:
    """The active user whose unrevoked token is in an ``Authorization: Bearer`` header."""
    record = token_for_header(header)
    return record.user if record is not None else None


def token_still_valid(token_id: int, conversation_id=None) -> bool:
    """Whether a token is still unrevoked and its user active (and, given a conversation,
    one its user may still reach); a few plain lookups. Open event streams ask this at every
    heartbeat."""
    found = ApiToken.objects.filter(pk=token_id, revoked__isnull=True, user__is_active=True)
    if conversation_id is None:
        return found.exists()
    user_id = next(iter(found.values_list("user_id", flat=True)[:1]), None)
    # (the user is active: the token's row said so)
    return user_id is not None and role_on(user_id, conversation_id, reader_active=True) is not None


def revoke_tokens(tokens: QuerySet[ApiToken]) -> int:
    """The one way to revoke tokens (the admin's action, the change form and the shell come
    here): marks them revoked and ends their open event streams on every server process.
    Returns how many were revoked."""
    live = list(tokens.filter(revoked__isnull=True).select_related("user"))
    ids = [token.pk for token in live]
    count = ApiToken.objects.filter(pk__in=ids, revoked__isnull=True).update(revoked=timezone.now())
    for token_id in ids:  # a bulk update sends no signal: tell the streams here
        notify_token_revoked(token_id)
    audit.tokens_revoked(live)
    return count


def revoke_token(record: ApiToken) -> None:
    revoke_tokens(ApiToken.objects.filter(pk=record.pk))
    record.refresh_from_db(fields=["revoked"])
