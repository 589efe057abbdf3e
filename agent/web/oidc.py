"""Single sign-on by OpenID Connect (``HARNESS_OIDC_*``, harness_site/sso.py), through
mozilla-django-oidc: the authorization code flow with state, nonce and PKCE; the ID token's
signature checked against the provider's JWKS, its nonce against the session's, its
audience against the client id; the user info must be about the ID token's subject.

The account is found by the provider's issuer and subject (``OidcIdentity``), never by a
name or an address: a claim equal to a local account's name (``root``) gets an account of
its own (``root-2``). On first sign-in the account is made with a name from
``HARNESS_OIDC_USERNAME_CLAIM`` (else the email), made safe (ASCII letters, digits and
``_.@+-``) and unique, and with no usable password. An inactive account cannot sign in,
and a session of an account made inactive later is no longer signed in.

Every sign-in and every refusal is in the audit log (``via: oidc``, the reason for a
refusal). The ``/oidc/`` views always exist and answer 404 when single sign-on is not
configured, so the URLs need no reload to be tested and an unconfigured server offers
nothing.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from functools import wraps

import jwt
import requests
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import SuspiciousOperation
from django.db import IntegrityError, transaction
from django.http import Http404, HttpResponseRedirect
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from agent import audit
from agent.models import AuditEntry, OidcIdentity, User

log = logging.getLogger(__name__)
BACKEND = "agent.web.oidc.OIDCBackend"
NOT_SAFE = re.compile(r"[^A-Za-z0-9_.@+-]+")
MAX_USERNAME = 150


class Refused(Exception):
    """A sign-in refused, with the reason for the audit log (nothing secret in it)."""

    def __init__(self, reason: str, username: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.username = username


def safe_username(raw: object) -> str:
    """A claim made into a name: ASCII letters, digits and ``_.@+-``, others replaced by
    ``-`` (so no look-alike letters), at most 150 characters; empty when nothing is left."""
    if not isinstance(raw, str):
        return ""
    name = NOT_SAFE.sub("-", unicodedata.normalize("NFKC", raw).strip())
    return name.strip("-.")[:MAX_USERNAME]


def unique_username(base: str) -> str:
    """``base``, else ``base-2``, ``base-3``…: no other account has it in any case."""
    for number in range(1, 1000):
        suffix = "" if number == 1 else f"-{number}"
        candidate = base[: MAX_USERNAME - len(suffix)] + suffix
        if not User.objects.filter(username__iexact=candidate).exists():
            return candidate
    raise Refused("no free name for the account", base)


class OIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend, answering only the callback view (a password
    sign-in's credentials do not fit its signature, so it never calls the provider), with
    the account found by issuer and subject, and inactive accounts refused."""

    def authenticate(self, request, *, nonce: str, code_verifier: str | None = None):
        if request is None or not nonce:
            return None
        try:
            return super().authenticate(request, nonce=nonce, code_verifier=code_verifier)
        except SuspiciousOperation as exc:  # bad signature, wrong nonce, unknown key…
            raise Refused(str(exc)) from exc
        except requests.HTTPError as exc:
            status = exc.response.status_code if exc.response is not None else "?"
            raise Refused(f"the provider refused (HTTP {status})") from exc
        except requests.RequestException as exc:
            raise Refused(f"the provider could not be reached ({type(exc).__name__})") from exc
        except (jwt.PyJWTError, ValueError, KeyError, TypeError) as exc:  # expired, malformed
            raise Refused(f"a bad token or answer ({type(exc).__name__}: {exc})"[:200]) from exc

    def verify_token(self, token, **kwargs):
        payload = super().verify_token(token, **kwargs)  # the signature, and the nonce
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("the token is for another client (aud)")
        for claim in ("iss", "sub"):
            if not isinstance(payload.get(claim), str) or not payload[claim]:
                raise SuspiciousOperation(f"the token has no {claim}")
        return payload

    def get_or_create_user(self, access_token, id_token, payload):
        info = self.get_userinfo(access_token, id_token, payload)
        if not isinstance(info, dict) or info.get("sub") != payload["sub"]:
            # OpenID Connect Core §5.3.2: else the answer may be about someone else.
            raise Refused("the user info is not about the token's subject")
        claims = {**payload, **info}
        issuer, subject = payload["iss"][:255], payload["sub"][:255]
        for _ in range(3):  # two first sign-ins at once: the loser finds the winner's account
            identity = OidcIdentity.objects.select_related("user").filter(
                issuer=issuer, subject=subject
            ).first()  # fmt: skip
            if identity is not None:
                return self._active(identity.user)
            try:
                with transaction.atomic():
                    user = self.create_user(claims)
                    OidcIdentity.objects.create(user=user, issuer=issuer, subject=subject)
                return self._active(user)
            except IntegrityError:
                continue
        raise Refused("the account could not be made", self.get_username(claims))

    def _active(self, user: User) -> User:
        if not self.user_can_authenticate(user):
            raise Refused("the account is inactive", user.get_username())
        return user

    def get_username(self, claims) -> str:
        for claim in (settings.HARNESS_OIDC_USERNAME_CLAIM, "email"):
            name = safe_username(claims.get(claim))
            if name:
                return name
        return "user"

    def create_user(self, claims):
        email = claims.get("email")
        email = email if isinstance(email, str) and "@" in email and len(email) <= 254 else ""
        user = User(username=unique_username(self.get_username(claims)), email=email)
        user.set_unusable_password()
        user.save()
        log.info("single sign-on made the account %s", user.username)
        return user

    def user_can_authenticate(self, user) -> bool:
        return ModelBackend.user_can_authenticate(self, user)

    def get_user(self, user_id):
        # Django's check, which mozilla-django-oidc's leaves out: an inactive account's
        # session signs in no one.
        return ModelBackend.get_user(self, user_id)


def _only_when_configured(view):
    @wraps(view)
    def configured(request, *args, **kwargs):
        if not settings.HARNESS_OIDC:
            raise Http404("single sign-on is not configured")
        return view(request, *args, **kwargs)

    return configured


class Callback(OIDCAuthenticationCallbackView):
    """The provider sends the browser back here with a code and the state. The state must
    be one this session started (used once), then the backend checks the rest; each refusal
    is audited and leads to the sign-in page, saying so."""

    def get(self, request):
        states = request.session.get("oidc_states") or {}
        state = request.GET.get("state") or ""
        pending = states.pop(state, None) if state else None
        if pending is not None:
            request.session["oidc_states"] = states  # used once, whatever happens next
        if request.GET.get("error"):
            return self.refused(f"the provider answered {request.GET['error'][:100]!r}")
        if pending is None:
            return self.refused("a state this browser did not start (or used already)")
        if not request.GET.get("code"):
            return self.refused("no code")
        try:
            user = OIDCBackend().authenticate(
                request, nonce=pending["nonce"], code_verifier=pending.get("code_verifier")
            )
        except Refused as exc:
            return self.refused(exc.reason, exc.username)
        if user is None:
            return self.refused("no account")
        user.backend = BACKEND
        self.user = user
        return self.login_success()

    def refused(self, reason: str, username: str = "") -> HttpResponseRedirect:
        log.warning("single sign-on refused %s: %s", username or "a sign-in", reason)
        audit.record(AuditEntry.Action.SIGN_IN_FAILED, target=username[:150],
                     request=self.request, via="oidc", reason=reason)  # fmt: skip
        return self.login_failure()


authenticate = _only_when_configured(OIDCAuthenticationRequestView.as_view())
callback = _only_when_configured(Callback.as_view())


class LoginView(auth_views.LoginView):
    """The sign-in page: the password form and, when configured, "Sign in with …"."""

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        if settings.HARNESS_OIDC:
            context["sso_button"] = settings.HARNESS_OIDC_BUTTON
            context["sso_failed"] = self.request.GET.get("sso") == "failed"
        return context
