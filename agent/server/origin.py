"""The WebSocket's origin check: the page that opens a socket must be this very origin.

Browsers send cookies with a WebSocket handshake from any page and leave the decision to
the server, which sees the page's ``Origin``. Channels' AllowedHostsOriginValidator compares
host names only, so a page on another port or scheme of the same host (another service on
:8080, plain http beside https) could drive a signed-in user's agent. Here the whole origin
(scheme, host, port) must equal the one the request was sent to: its ``Host`` header (which
must be one of ALLOWED_HOSTS) and the scheme the server sees (``wss`` is https; behind a
TLS proxy, SECURE_PROXY_SSL_HEADER, as Django reads it for ``request.is_secure()``), or be
listed in CSRF_TRUSTED_ORIGINS (Django's form: ``https://example.com``,
``https://*.example.com``). A missing or ``null`` origin is refused.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

DEFAULT_PORTS = {"http": 80, "https": 443}

Origin = tuple[str, str, int]


def parse_origin(text: str) -> Origin | None:
    """(scheme, host, port) of a serialized origin, or None if it is not one."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    if parts.username or parts.password or parts.path not in ("", "/") or parts.query:
        return None
    return parts.scheme, parts.hostname.lower(), port or DEFAULT_PORTS[parts.scheme]


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _allowed_hosts() -> list[str]:
    hosts = settings.ALLOWED_HOSTS
    if settings.DEBUG and not hosts:  # as Django's HttpRequest.get_host()
        hosts = [".localhost", "127.0.0.1", "[::1]"]
    return hosts


def request_scheme(scope) -> str:
    """http or https: what the client connected with, as Django's is_secure() reads it."""
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        header, secure_value = proxy
        name = header.removeprefix("HTTP_").replace("_", "-").lower().encode()
        value = _header(scope, name)
        if value is not None:
            return "https" if value.split(",", 1)[0].strip() == secure_value else "http"
    return "https" if scope.get("scheme") in ("wss", "https") else "http"


def own_origin(scope) -> Origin | None:
    """The origin this request was sent to, or None if its Host is not one of ours."""
    host = _header(scope, b"host")
    if not host:
        return None
    domain, port = split_domain_port(host)
    if not domain or not validate_host(domain, _allowed_hosts()):
        return None
    scheme = request_scheme(scope)
    try:
        number = int(port) if port else DEFAULT_PORTS[scheme]
    except ValueError:
        return None
    return scheme, domain.strip("[]").lower(), number


def _trusted(origin: Origin) -> bool:
    scheme, host, port = origin
    for entry in settings.CSRF_TRUSTED_ORIGINS:
        if "://*." in entry:
            entry_scheme, _, rest = entry.partition("://*")
            pattern = parse_origin(f"{entry_scheme}://{rest.lstrip('.')}")
            if (
                pattern is not None
                and pattern[0] == scheme
                and pattern[2] == port
                and is_same_domain(host, "." + pattern[1])
            ):
                return True
        elif parse_origin(entry) == origin:
            return True
    return False


def origin_allowed(scope) -> bool:
    origin = parse_origin(_header(scope, b"origin") or "")
    own = own_origin(scope)
    if origin is None or own is None:
        return False
    return origin == own or _trusted(origin)


class SameOriginValidator:
    """ASGI middleware: refuses (HTTP 403 at the handshake) a WebSocket from another
    origin."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
