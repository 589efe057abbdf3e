"""API tokens: created once, shown once, stored as SHA-256, checked on every request."""

from __future__ import annotations

import hashlib
import secrets

from django.utils import timezone

from .models import ApiToken, User

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


def user_for_token(header: str | None) -> User | None:
    """The active user whose unrevoked token is in an ``Authorization: Bearer`` header."""
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
    ApiToken.objects.filter(pk=record.pk).update(last_used=timezone.now())
    return record.user
