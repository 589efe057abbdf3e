"""Tiny strict readers for environment variables.

A bad value stops start-up with ImproperlyConfigured naming the variable, instead of a
default silently taking its place.
"""

from __future__ import annotations

import os
from decimal import Decimal, InvalidOperation
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None or value == "" else value


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
    return value


def env_fraction(name: str, default: float, *, minimum: float = 0.0) -> float:
    """A number between ``minimum`` and 1."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {raw!r}") from None
    if not minimum <= value <= 1:
        raise ImproperlyConfigured(f"{name} must be between {minimum:g} and 1, not {raw.strip()}")
    return value


def env_amount(name: str) -> Decimal | None:
    """An amount of money (a non-negative decimal); None when unset."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = Decimal(raw.strip())
    except InvalidOperation:
        raise ImproperlyConfigured(
            f"{name} must be an amount such as 50 or 12.50, not {raw!r}"
        ) from None
    if not value.is_finite() or value < 0:
        raise ImproperlyConfigured(f"{name} must be an amount such as 50 or 12.50, not {raw!r}")
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name} must be 1 or 0 (true/false), not {raw!r}")


def env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    if raw.strip() not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, not {raw!r}")
    return raw.strip()


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_secret(name: str, default: str | None = None) -> str | None:
    """A secret from NAME, or from the file NAME_FILE names (Docker secrets, systemd's
    LoadCredential=): the file's text without its trailing newline. Both set is an error,
    so it is always clear which one is in force."""
    file_name = env_str(f"{name}_FILE")
    if file_name is None:
        return env_str(name, default)
    if env_str(name) is not None:
        raise ImproperlyConfigured(f"set {name} or {name}_FILE, not both")
    try:
        value = Path(file_name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ImproperlyConfigured(f"{name}_FILE: cannot read {file_name!r}: {reason}") from None
    value = value.removesuffix("\n").removesuffix("\r")
    if not value:
        raise ImproperlyConfigured(f"{name}_FILE: {file_name!r} is empty")
    return value
