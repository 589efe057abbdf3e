"""The HTTP API's shared pieces: the bearer-token check and method check every view goes
through (``api_view``), the per-conversation access check (``of_conversation``), and the
JSON errors (docs/API.md).

Authenticated with ``Authorization: Bearer <token>`` on every request; every answer about
another user's conversation is 404; errors are JSON ``{"error", "message"}``. Too many bad
tokens from one address get 429 ``throttled`` (agent/web/throttle.py).
"""

from __future__ import annotations

import asyncio
import json
from functools import wraps
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt, csrf_protect

from agent.access import READ, allows, conversation_for
from agent.models import Conversation
from agent.web.api_tokens import token_for_header
from agent.web.throttle import Throttled, token_failed, token_failures_blocked

REFUSAL_STATUS = {"prompt_running": 409, "quota_concurrent": 429, "quota_rate": 429,
                  "not_found": 404, "forbidden": 403, "storage_full": 507,
                  "prompt_too_large": 400, "bad_mode": 400, "queue_full": 429,
                  "budget_exceeded": 429, "already_decided": 409, "bad_image": 400,
                  "quota_exceeded": 413, "agent_unavailable": 400}  # fmt: skip


def api_error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": code, "message": message}, status=status)


def throttled(refusal: Throttled) -> JsonResponse:
    response = api_error(429, "throttled", refusal.message)
    response["Retry-After"] = str(refusal.retry_after)
    return response


def too_large() -> JsonResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return api_error(413, "too_large", f"The request body is over the limit of {limit:,} bytes.")


def _check(request: HttpRequest, methods: tuple[str, ...]) -> JsonResponse | None:
    if request.method not in methods:
        return api_error(405, "method_not_allowed", f"Use {' or '.join(methods)}.")
    # Before the token is looked up: an address guessing tokens is refused without a query.
    wait = token_failures_blocked(request)
    if wait is not None:
        return throttled(Throttled("Too many requests with a bad token from this address; "
                                   f"try again in {wait} s.", wait))  # fmt: skip
    token = token_for_header(request.headers.get("Authorization"))
    if token is None:
        token_failed(request)
        return api_error(401, "unauthorized", "A valid 'Authorization: Bearer' token is required.")
    request.api_user, request.api_token_id = token.user, token.pk
    return None


def api_view(*methods: str, session: bool = False):
    """Check the method and the bearer token (``request.api_user``) for a sync or async
    view; tokens, not cookies, so no CSRF. ``session``: a request without a token from a
    signed-in browser is its user's too, with Django's CSRF check."""

    def decorate(view):
        if session:
            return _token_or_session(view, methods)
        if asyncio.iscoroutinefunction(view):

            @wraps(view)
            async def async_wrapper(request, *args, **kwargs):
                refused = await sync_to_async(_check)(request, methods)
                try:
                    return refused or await view(request, *args, **kwargs)
                except RequestDataTooBig:  # Django's answer is an HTML 400
                    return too_large()

            return csrf_exempt(async_wrapper)

        @wraps(view)
        def wrapper(request, *args, **kwargs):
            try:
                return _check(request, methods) or view(request, *args, **kwargs)
            except RequestDataTooBig:
                return too_large()

        return csrf_exempt(wrapper)

    return decorate


def _token_or_session(view, methods: tuple[str, ...]):
    """A bearer token as ``api_view``'s; without one, the signed-in browser's session, its
    writes under Django's CSRF check (the page's ``X-CSRFToken``)."""
    protected = csrf_protect(view)
    if asyncio.iscoroutinefunction(view):

        @wraps(view)
        async def async_wrapper(request, *args, **kwargs):
            user = await request.auser()
            try:
                if "Authorization" not in request.headers and user.is_authenticated:
                    refused = _as_session(request, user, methods)
                    return refused or await protected(request, *args, **kwargs)
                refused = await sync_to_async(_check)(request, methods)
                return refused or await view(request, *args, **kwargs)
            except RequestDataTooBig:
                return too_large()

        return csrf_exempt(async_wrapper)

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        try:
            if "Authorization" not in request.headers and request.user.is_authenticated:
                return _as_session(request, request.user, methods) or protected(
                    request, *args, **kwargs
                )
            return _check(request, methods) or view(request, *args, **kwargs)
        except RequestDataTooBig:
            return too_large()

    return csrf_exempt(wrapper)


def _as_session(request: HttpRequest, user, methods: tuple[str, ...]) -> JsonResponse | None:
    if request.method not in methods:
        return api_error(405, "method_not_allowed", f"Use {' or '.join(methods)}.")
    request.api_user, request.api_token_id = user, None
    return None


def json_body(request: HttpRequest) -> dict[str, Any] | None:
    try:
        body = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) else None


def one_of(value, choices) -> bool:
    """Whether ``value`` is one of ``choices`` (strings). A string first: JSON gives lists
    and objects too, and asking a dict or set about one raises (a 500, not a 400)."""
    return isinstance(value, str) and value in choices


def conversation_json(c: Conversation) -> dict[str, Any]:
    """A conversation in a list: with the caller's ``role``."""
    return {"id": str(c.id), "title": c.title, "created": c.created.isoformat(), "state": c.state,
            "role": getattr(c, "role", "owner"), "pinned": c.pinned,
            "archived": c.archived}  # fmt: skip


def conversation_detail(c: Conversation) -> dict[str, Any]:
    """One conversation, with its settings (``thinking`` null: the deployment's default)."""
    return {**conversation_json(c), "model": c.model, "thinking": c.thinking or None,
            "approval": c.approval or settings.HARNESS_APPROVAL, "team": c.team,
            "agent": c.agent, "project": str(c.project_id) if c.project_id else None,
            "branch": c.branch or None, "instructions": c.instructions}  # fmt: skip


def forbidden() -> JsonResponse:
    return api_error(403, "forbidden", "You may read this conversation but not do this.")


def of_conversation(level: str = READ, **by_method: str):
    """An API view of one conversation: called with it when the caller's role allows
    ``level`` (or the level given for the request's method: ``PATCH=OWN``); 403
    ``forbidden`` when they may read it but not that; else 404 (a conversation one cannot
    read is not found, never forbidden). Always through the access helper."""

    def decorate(view):
        @wraps(view)
        async def wrapper(request: HttpRequest, conversation_id, **kwargs) -> HttpResponse:
            user = request.api_user
            conversation = await sync_to_async(conversation_for)(user, conversation_id)
            if conversation is None:
                return api_error(404, "not_found", "No such conversation.")
            if not allows(conversation.role, by_method.get(request.method, level)):
                return forbidden()
            return await view(request, conversation, **kwargs)

        return wrapper

    return decorate
