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
"""

from __future__ import annotations

import hmac
import re

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.backends import RemoteUserBackend
from django.contrib.auth.middleware import RemoteUserMiddleware

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
    """Users the proxy names: created on first sight, never with a usable password."""

    create_unknown_user = True

    def clean_username(self, username: str) -> str:
        username = username.strip()
        # An odd name is refused rather than changed: two names must never meet in one.
        return username if USERNAME.match(username) else ""

    def authenticate(self, request, remote_user):
        if not remote_user or not self.clean_username(remote_user):
            return None
        return super().authenticate(request, remote_user)

    def configure_user(self, request, user, created=True):
        if created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
        return user
