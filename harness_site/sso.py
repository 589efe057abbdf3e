"""Single sign-on by OpenID Connect, from the environment (docs/DEPLOY.md "Sign-in for a
team"): the Django settings mozilla-django-oidc reads, or none when no HARNESS_OIDC_*
variable is set. Some set and some not is a start-up error naming what is missing, like
every other bad setting. A function rather than lines in settings.py so that the tests turn
single sign-on on with exactly the mapping a server uses (tests/web/test_oidc.py).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from .env import env_choice, env_secret, env_str

# The endpoints a provider's discovery document lists; explicit, so nothing is fetched at
# start-up and a provider that is down cannot stop the server.
ENDPOINTS = {
    "HARNESS_OIDC_AUTHORIZATION_ENDPOINT": "OIDC_OP_AUTHORIZATION_ENDPOINT",
    "HARNESS_OIDC_TOKEN_ENDPOINT": "OIDC_OP_TOKEN_ENDPOINT",
    "HARNESS_OIDC_USERINFO_ENDPOINT": "OIDC_OP_USER_ENDPOINT",
    "HARNESS_OIDC_JWKS_ENDPOINT": "OIDC_OP_JWKS_ENDPOINT",
}
REQUIRED = ("HARNESS_OIDC_CLIENT_ID", "HARNESS_OIDC_CLIENT_SECRET", *ENDPOINTS)
OPTIONAL = ("HARNESS_OIDC_SIGN_ALGO", "HARNESS_OIDC_USERNAME_CLAIM", "HARNESS_OIDC_BUTTON")
# Signed with the provider's key, checked against its JWKS (never the shared-secret HS*
# algorithms, nor "none").
SIGN_ALGOS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")
CLAIM = re.compile(r"[A-Za-z0-9_.:-]{1,100}")


def oidc_settings(*, debug: bool) -> dict[str, Any]:
    """The settings for single sign-on, or {} when it is not configured.

    ``debug``: plain-http endpoints are allowed (a provider on the developer's machine);
    otherwise every endpoint must be https, since the client secret and the user's code
    travel to them."""
    values = {
        "HARNESS_OIDC_CLIENT_ID": env_str("HARNESS_OIDC_CLIENT_ID"),
        "HARNESS_OIDC_CLIENT_SECRET": env_secret("HARNESS_OIDC_CLIENT_SECRET"),
        **{name: env_str(name) for name in ENDPOINTS},
    }
    optional = {name: env_str(name) for name in OPTIONAL}
    if all(value is None for value in (*values.values(), *optional.values())):
        return {}
    missing = [name for name in REQUIRED if values[name] is None]
    if missing:
        given = sorted(name for name, value in {**values, **optional}.items() if value)
        raise ImproperlyConfigured(
            f"single sign-on (OpenID Connect) is half configured: {', '.join(given)} "
            f"set, {', '.join(missing)} missing"
            + (" (or HARNESS_OIDC_CLIENT_SECRET_FILE)" if "HARNESS_OIDC_CLIENT_SECRET" in missing
               else "")
        )  # fmt: skip
    for name in ENDPOINTS:
        url = urlsplit(values[name])
        schemes = ("https", "http") if debug else ("https",)
        if url.scheme not in schemes or not url.hostname:
            raise ImproperlyConfigured(
                f"{name} must be an {' or '.join(schemes)} URL, not {values[name]!r}"
            )
    claim = optional["HARNESS_OIDC_USERNAME_CLAIM"] or "preferred_username"
    if not CLAIM.fullmatch(claim):
        raise ImproperlyConfigured(
            f"HARNESS_OIDC_USERNAME_CLAIM must be a claim name, not {claim!r}"
        )
    button = (optional["HARNESS_OIDC_BUTTON"] or "single sign-on").strip()
    if not 1 <= len(button) <= 60:
        raise ImproperlyConfigured("HARNESS_OIDC_BUTTON must be 1 to 60 characters")
    return {
        "HARNESS_OIDC": True,
        "HARNESS_OIDC_USERNAME_CLAIM": claim,
        "HARNESS_OIDC_BUTTON": button,
        "OIDC_RP_CLIENT_ID": values["HARNESS_OIDC_CLIENT_ID"],
        "OIDC_RP_CLIENT_SECRET": values["HARNESS_OIDC_CLIENT_SECRET"],
        **{setting: values[name] for name, setting in ENDPOINTS.items()},
        "OIDC_RP_SIGN_ALGO": env_choice("HARNESS_OIDC_SIGN_ALGO", SIGN_ALGOS, "RS256"),
        # profile: preferred_username; email: the fallback name and the account's address.
        "OIDC_RP_SCOPES": "openid email profile",
        "OIDC_USE_NONCE": True,
        # PKCE as well as the client secret: a code seen on the way back is of no use alone
        # (providers that do not know PKCE ignore it, RFC 7636 §5).
        "OIDC_USE_PKCE": True,
        # A provider that stops answering fails the sign-in instead of holding a thread.
        "OIDC_TIMEOUT": 10,
        "OIDC_CREATE_USER": True,
        "OIDC_STORE_ACCESS_TOKEN": False,
        "OIDC_STORE_ID_TOKEN": False,
        "OIDC_AUTHENTICATION_CALLBACK_URL": "oidc_authentication_callback",
        "LOGIN_REDIRECT_URL_FAILURE": "/accounts/login/?sso=failed",
    }
