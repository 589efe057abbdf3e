"""Rate limits kept in Django's cache: failed bearer tokens per client address, new
conversations per user, and the page shown when django-axes locks a login out.

The counters live in the cache (``settings.CACHES``): process memory by default, Redis when
``REDIS_URL`` is set, so that every server process counts against the same limit. Each
limit is a fixed window: one counter per window, atomically incremented, which expires
with it; ``Retry-After`` is the time left in the window.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

log = logging.getLogger(__name__)


class Throttled(Exception):  # noqa: N818 - a refusal, raised like one
    """A limit is reached; ``retry_after`` seconds until the window ends."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.message, self.retry_after = message, retry_after


def client_ip(request: HttpRequest) -> str:
    """The address the request came from: REMOTE_ADDR, which Daphne sets to the peer (or,
    started with ``--proxy-headers`` behind a proxy, to what the proxy reports). Headers
    such as X-Forwarded-For are not read here: any client can send them. Also django-axes'
    ``AXES_CLIENT_IP_CALLABLE``, so both limits count the same address."""
    return request.META.get("REMOTE_ADDR") or "unknown"


def _window(name: str, subject: str, window: int) -> tuple[str, int]:
    now = time.time()
    bucket = int(now // window)
    # Hashed: cache keys must be short and plain whatever the subject (an IPv6 address).
    digest = hashlib.sha256(subject.encode()).hexdigest()[:32]
    retry_after = max(1, math.ceil((bucket + 1) * window - now))
    return f"harness:throttle:{name}:{digest}:{bucket}", retry_after


def count(name: str, subject: str, window: int) -> tuple[int, int]:
    """Adds one to ``subject``'s counter for this window; (the new count, seconds left)."""
    key, retry_after = _window(name, subject, window)
    cache.add(key, 0, timeout=window + 1)  # atomic when absent; never resets a counter
    try:
        return cache.incr(key), retry_after
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=window + 1)
        return 1, retry_after


def current(name: str, subject: str, window: int) -> tuple[int, int]:
    """``subject``'s count in this window, without adding to it; (count, seconds left)."""
    key, retry_after = _window(name, subject, window)
    return cache.get(key, 0), retry_after


# -- Bearer tokens: failures per client address ------------------------------------------
TOKEN_FAILURE_WINDOW = 60  # seconds


def token_failures_blocked(request: HttpRequest) -> int | None:
    """Seconds to wait when this address has sent too many bad tokens lately, else None.
    A cache read, no database query: it runs before the token is looked up."""
    failures, retry_after = current("api-token", client_ip(request), TOKEN_FAILURE_WINDOW)
    return retry_after if failures >= settings.HARNESS_API_TOKEN_FAILURES else None


def token_failed(request: HttpRequest) -> None:
    count("api-token", client_ip(request), TOKEN_FAILURE_WINDOW)


# -- New conversations per user ----------------------------------------------------------
CONVERSATION_WINDOW = 3600  # seconds


def check_new_conversation(user) -> None:
    """Counts one new conversation for ``user``; raises Throttled beyond the hourly limit."""
    limit = settings.HARNESS_CONVERSATIONS_PER_HOUR
    made, retry_after = count("conversations", str(user.pk), CONVERSATION_WINDOW)
    if made > limit:
        minutes = math.ceil(retry_after / 60)
        raise Throttled(
            f"You have started {limit} conversations this hour, the limit. Continue one of "
            f"them, or start a new one in {minutes} minute{'s' if minutes != 1 else ''}.",
            retry_after,
        )


# -- Logins (django-axes) ----------------------------------------------------------------
def proxy_sign_in(request: HttpRequest, credentials=None) -> bool:
    """django-axes' ``AXES_WHITELIST_CALLABLE``: a sign-in by the authenticating proxy
    (agent/web/proxy_auth.py) names the user the proxy vouched for, believed only with the
    proxy's secret: there is no password to guess, so its refusals (a local account not
    linked to it) neither count towards a lockout nor lock out the proxy's other users."""
    return isinstance(credentials, dict) and "remote_user" in credentials


def login_locked_out(request: HttpRequest, original_response=None, credentials=None):
    """django-axes' lockout page (AXES_LOCKOUT_CALLABLE): the sign-in page with the reason,
    429 and Retry-After. The admin's sign-in gets the same page: both go through
    ``authenticate()``, where axes counts failures."""
    minutes = settings.HARNESS_LOGIN_COOLOFF_MINUTES
    response: HttpResponse = render(
        request,
        "registration/locked_out.html",
        {"failures": settings.AXES_FAILURE_LIMIT, "minutes": minutes},
        status=429,
    )
    response["Retry-After"] = str(minutes * 60)
    return response
