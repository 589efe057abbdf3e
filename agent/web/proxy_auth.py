"""Sign-in by an authenticating proxy (``HARNESS_TRUSTED_PROXY_HEADER``).

Behind a proxy that authenticates people itself (oauth2-proxy, Authelia, a company SSO
gateway), the proxy names the user in a header, and the user is signed in as that name,
created on first sight (with no usable password). A header anyone could send proves
nothing, so the name is taken only from a request that also carries the proxy's secret
(``X-Harness-Proxy-Secret``, compared in constant time with
``HARNESS_TRUSTED_PROXY_SECRET``). A secret, not the proxy's address: behind
``daphne --proxy-headers`` the address the app sees is the client's, not the proxy's. A
request without the secret is an ordinary one (a session, a password sign-in); its user
header is ignored. The sign-in sets the session cookie, which the WebSocket then uses.

A name signs in only as an account linked to proxy sign-in (``ProxyIdentity``): one made
by it, on first sight, or one an administrator linked in the admin. A name equal (in any
case) to a local account that is not linked (``root``, the superuser an installation
starts with) signs in no one: the proxy vouches for its own users, not for accounts made
here, as OpenID Connect binds to its own identities (agent/web/oidc.py). Refusals are in
the audit log with their reason (``via: proxy``).
"""

from __future__ import annotations

import hmac
import logging
import re

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.backends import RemoteUserBackend
from django.contrib.auth.middleware import RemoteUserMiddleware
from django.db import IntegrityError, transaction

from agent import audit
from agent.models import AuditEntry, ProxyIdentity, User

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Harness-Proxy-Secret"
USERNAME = re.compile(r"^[\w.@+-]{1,150}$")


def _meta_key(header: str) -> str:
    return "HTTP_" + header.upper().replace("-", "_")


def from_trusted_proxy(request) -> bool:
    presented = request.META.get(_meta_key(SECRET_HEADER), "")
    expected = settings.HARNESS_TRUSTED_PROXY_SECRET or ""
    return bool(expected) and hmac.compare_digest(presented.encode(), expected.encode())


class TrustedProxyUserMiddleware(RemoteUserMiddleware):
    """Django's remote-user sign-in, for the configured header, from the proxy only."""

    @property
    def header(self) -> str:
        return _meta_key(settings.HARNESS_TRUSTED_PROXY_HEADER)

    def process_request(self, request):
        if not from_trusted_proxy(request):
            return  # not the proxy: its header means nothing, the session stays as it is
        return super().process_request(request)

    async def aprocess_request(self, request):
        # The same code as the sync path (Django's async one prefixes the header name
        # again); its database work goes to a thread.
        if from_trusted_proxy(request):
            await sync_to_async(RemoteUserMiddleware.process_request)(self, request)


class TrustedProxyUserBackend(RemoteUserBackend):
    """Users the proxy names, as accounts linked to proxy sign-in: made on first sight
    (never with a usable password), never a local account the proxy did not make."""

    def clean_username(self, username: str) -> str:
        username = username.strip()
        # An odd name is refused rather than changed: two names must never meet in one.
        return username if USERNAME.match(username) else ""

    def authenticate(self, request, remote_user):
        name = self.clean_username(remote_user) if isinstance(remote_user, str) else ""
        if not name:
            return _refused(request, str(remote_user or "")[:150], "not a plain user name")
        user = _linked_account(name)
        if user is None:
            return _refused(request, name, "a local account not linked to proxy sign-in")
        if not self.user_can_authenticate(user):
            return _refused(request, name, "the account is inactive")
        return user


def _linked_account(name: str) -> User | None:
    """The account proxy sign-in may sign in as by ``name``, made (and linked) on first
    sight; None when an account not linked to it has the name, in any case."""
    for _ in range(3):  # two first sign-ins at once: the loser finds the winner's account
        linked = User.objects.filter(username=name, proxy_identity__isnull=False).first()
        if linked is not None:
            return linked
        if User.objects.filter(username__iexact=name).exists():
            return None
        try:
            with transaction.atomic():
                user = User(username=name)
                user.set_unusable_password()
                user.save()
                ProxyIdentity.objects.create(user=user)
            return user
        except IntegrityError:
            continue
    return None


def _refused(request, name: str, reason: str) -> None:
    log.warning("proxy sign-in refused %s: %s", name or "a name", reason)
    audit.record(AuditEntry.Action.SIGN_IN_FAILED, target=name, request=request, via="proxy",
                 reason=reason)  # fmt: skip
    return None
