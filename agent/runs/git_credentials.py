"""Users' git credentials (docs/API.md, "Git credentials"): one per user and host, the token
encrypted at rest, read back only by the git relay (agent/runs/git_relay.py) as it adds
it to a request to that host. Nothing shows a token again: not the API, not the admin.

Encryption: AES-256-GCM with a key derived by HKDF-SHA256 from ``HARNESS_CREDENTIALS_KEY``
(or, unset, ``DJANGO_SECRET_KEY``), the row's user and host as associated data, so a
sealed token copied into another user's row, or another host's, does not open there.
Stored as version byte, 12-byte nonce, ciphertext and tag.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

from agent.core.egress_rules import BadRule, split_host_port, valid_host
from agent.models import GitCredential

VERSION = b"\x01"
INFO = b"harness git credentials v1"
MAX_TOKEN = 4096
MAX_FIELD = 255


class BadCredential(ValueError):
    """A host, username or token refused; the message says which and why."""


@dataclass(frozen=True)
class Credential:
    username: str
    token: str


def _key() -> bytes:
    secret = settings.HARNESS_CREDENTIALS_KEY or settings.SECRET_KEY
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=INFO).derive(secret.encode())


def _associated(user_id: int, host: str) -> bytes:
    return f"{int(user_id)}\n{host}".encode()


def seal(user_id: int, host: str, token: str) -> bytes:
    nonce = os.urandom(12)
    return (
        VERSION + nonce + AESGCM(_key()).encrypt(nonce, token.encode(), _associated(user_id, host))
    )


def unseal(user_id: int, host: str, sealed: bytes) -> str | None:
    """The token, or None when it does not open (another key, another row's)."""
    sealed = bytes(sealed)
    if sealed[:1] != VERSION:
        return None
    try:
        plain = AESGCM(_key()).decrypt(sealed[1:13], sealed[13:], _associated(user_id, host))
    except (InvalidTag, ValueError):
        return None
    return plain.decode()


def normal_host(text) -> str:
    """``host`` or ``host:port`` in lower case, as a credential is named."""
    if not isinstance(text, str) or not 0 < len(text) <= MAX_FIELD:
        raise BadCredential("the host must be a name or address, with a port if the URL has one")
    try:
        host, port = split_host_port(text)
    except BadRule as exc:
        raise BadCredential(str(exc)) from None
    if not valid_host(host):
        raise BadCredential(f"{text!r} is not a host name or address")
    shown = f"[{host}]" if ":" in host else host
    return shown if port is None else f"{shown}:{port}"


def host_of_url(url: str) -> str:
    """The credential's name for a remote URL: its host, with the port when it names one."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    shown = f"[{host}]" if ":" in host else host
    return shown if parts.port is None else f"{shown}:{parts.port}"


def _printable(value, name: str, limit: int) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= limit:
        raise BadCredential(f"'{name}' must be a string of 1 to {limit} characters")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise BadCredential(f"'{name}' must not hold control characters")
    return value


def store(user, host: str, username, token) -> None:
    host = normal_host(host)
    username = _printable(username, "username", MAX_FIELD)
    if ":" in username:
        raise BadCredential("'username' must not hold ':' (HTTP Basic auth cannot carry it)")
    token = _printable(token, "token", MAX_TOKEN)
    GitCredential.objects.update_or_create(
        user=user, host=host, defaults={"username": username, "secret": seal(user.pk, host, token)}
    )


def listed(user) -> list[dict[str, str]]:
    rows = GitCredential.objects.filter(user=user).order_by("host").values("host", "username")
    return [{"host": row["host"], "username": row["username"]} for row in rows]


def remove(user, host: str) -> bool:
    deleted, _ = GitCredential.objects.filter(user=user, host=normal_host(host)).delete()
    return bool(deleted)


def for_url(user_id: int, url: str) -> Credential | None:
    """The user's credential for ``url``'s host, opened; None when there is none (or it
    no longer opens: the key changed)."""
    host = host_of_url(url)
    row = GitCredential.objects.filter(user_id=user_id, host=host).first()
    if row is None:
        return None
    token = unseal(user_id, host, row.secret)
    return None if token is None else Credential(row.username, token)
