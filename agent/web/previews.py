"""Previews over HTTP: ``/preview/<conversation>/<port>/…`` (the public address: a signed-in
reader is redirected to the signed one) and ``/preview/<conversation>/<port>/~<token>/…``
(agent/web/preview_tokens.py), relayed to the port inside the conversation's terminal
sandbox (agent/runs/previews.py). Every answer under /preview/, errors too, carries the
sandboxing policy and no referrer, and none carries a cookie either way: previewed content
is hostile and must never act as the user. With ``HARNESS_PREVIEW_ORIGIN`` the signed
addresses are served from that origin only.
"""

from __future__ import annotations

import uuid
from urllib.parse import quote, urlsplit

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    JsonResponse,
    StreamingHttpResponse,
)
from django.template.loader import render_to_string
from django.views.decorators.csrf import csrf_exempt

from agent import access
from agent.access import DRIVE, READ
from agent.models import Conversation
from agent.runs import previews
from agent.web import preview_http, preview_tokens
from agent.web.api_base import api_view, of_conversation

SANDBOX_POLICY = "sandbox allow-scripts allow-forms allow-popups allow-modals"


def isolate(response: HttpResponse) -> HttpResponse:
    response["Content-Security-Policy"] = SANDBOX_POLICY
    response["Referrer-Policy"] = "no-referrer"
    response["X-Content-Type-Options"] = "nosniff"
    if settings.HARNESS_PREVIEW_ORIGIN:
        response.xframe_options_exempt = True  # framed by the app's page, another origin
    else:
        response["X-Frame-Options"] = "SAMEORIGIN"
    response.cookies.clear()
    return response


def page(status: int, title: str, detail: str, again: str = "") -> HttpResponse:
    html = render_to_string("agent/preview_unavailable.html",
                            {"title": title, "detail": detail, "again": again})  # fmt: skip
    return isolate(HttpResponse(html, status=status))


def sandboxes_for(role: str | None) -> tuple[str, ...]:
    """Whose sandboxes a reader's preview reaches: the CLI agent's holds the CLI itself (and
    what it serves to be driven), so only those who may drive it reach its ports; a viewer
    reaches the terminal's."""
    return previews.SANDBOXES if access.allows(role, DRIVE) else (previews.SHELL,)


def proxy_headers() -> frozenset[str]:
    """The authenticating proxy's user header, when the deployment has one: the reader's
    name, never the previewed server's."""
    name = settings.HARNESS_TRUSTED_PROXY_HEADER
    return frozenset({name.lower()}) if name else frozenset()


def public_path(conversation_id: uuid.UUID, port: int, rest: str = "") -> str:
    return f"/preview/{conversation_id}/{port}/{rest}"


def preview_host() -> str:
    return urlsplit(settings.HARNESS_PREVIEW_ORIGIN).netloc


def parse(rest: str) -> tuple[uuid.UUID, int, str] | None:
    key, _, after = rest.partition("/")
    port, _, remainder = after.partition("/")
    try:
        conversation_id = uuid.UUID(key)
    except ValueError:
        return None
    if not port.isdigit() or not previews.MIN_PORT <= int(port) <= previews.MAX_PORT:
        return None
    return conversation_id, int(port), remainder


def target(remainder: str, query: str) -> str:
    path = quote("/" + remainder.partition("/")[2], safe="/:@!$&'()*+,;=~-._")
    return path + (f"?{query}" if query else "")


@csrf_exempt  # authorised by the signed address, never by the session's cookie
async def preview(request: HttpRequest, rest: str) -> HttpResponse:
    parsed = parse(rest)
    if parsed is None:
        return page(
            404,
            "No such preview",
            "A preview's address is /preview/<conversation>/"
            f"<port>/…, the port from {previews.MIN_PORT} to {previews.MAX_PORT}.",
        )
    conversation_id, port, remainder = parsed
    query = request.META.get("QUERY_STRING", "")
    if not remainder.startswith(preview_tokens.MARK):
        return await _sign(request, conversation_id, port, remainder, query)
    if settings.HARNESS_PREVIEW_ORIGIN and request.get_host() != preview_host():
        return isolate(HttpResponseRedirect(settings.HARNESS_PREVIEW_ORIGIN + request.path
                                            + (f"?{query}" if query else "")))  # fmt: skip
    token = remainder.partition("/")[0]
    user_id = preview_tokens.user_for(token, conversation_id, port)
    again = public_path(conversation_id, port)
    if user_id is None:
        return page(403, "This preview link has expired", "Open the preview again from the "
                    "conversation's page.", again)  # fmt: skip
    conversation = await sync_to_async(access.readable_one)(user_id, conversation_id)
    if conversation is None:
        return page(404, "No such preview", "This conversation is not available.")
    return await _relay(request, user_id, conversation_id, port, target(remainder, query),
                        conversation.role)  # fmt: skip


async def _sign(request, conversation_id: uuid.UUID, port: int, rest: str, query: str):
    user = await request.auser()
    if not user.is_authenticated:
        return isolate(redirect_to_login(request.get_full_path()))
    if await sync_to_async(access.readable_one)(user.pk, conversation_id) is None:
        return page(404, "No such preview", "This conversation is not available.")
    token = preview_tokens.make(user.pk, conversation_id, port)
    where = settings.HARNESS_PREVIEW_ORIGIN + public_path(conversation_id, port, f"{token}/{rest}")
    response = isolate(HttpResponseRedirect(where + (f"?{query}" if query else "")))
    response["Cache-Control"] = "no-store"
    return response


async def _relay(request, user_id: int, conversation_id, port: int, path: str,
                 role: str | None) -> HttpResponse:  # fmt: skip
    sandboxes = sandboxes_for(role)
    reading = None if access.allows(role, DRIVE) else conversation_id
    try:
        previews.slots.acquire(user_id, reading)
    except previews.PreviewUnavailable as exc:
        return page(503, "Too many previews", str(exc))
    try:
        reader, writer = await previews.connect(conversation_id, port, sandboxes)
    except previews.PreviewForbidden as exc:
        previews.slots.release(user_id, reading)
        return page(403, "Not a preview", str(exc))
    except previews.PreviewUnavailable as exc:
        previews.slots.release(user_id, reading)
        return page(502, "Nothing to preview", f"{exc} Start a server on that port in the "
                    "conversation's Terminal panel, or ask the agent to start one in the "
                    "background.")  # fmt: skip
    except BaseException:  # a request given up while the forwarder is slow to answer
        previews.slots.release(user_id, reading)
        raise
    try:
        body = request.body
        writer.write(preview_http.request_head(request.method, path, port, request.headers,
                                               len(body), proxy_headers()) + body)  # fmt: skip
        status, headers, every = await preview_http.read_head(reader)
    except (OSError, preview_http.BadAnswer) as exc:
        writer.close()
        previews.slots.release(user_id, reading)
        return page(502, "The previewed server did not answer", str(exc))
    except BaseException:  # (a cancelled request too) the slot and connection go back
        writer.close()
        previews.slots.release(user_id, reading)
        raise

    async def content():
        try:
            async for piece in preview_http.body(reader, every, request.method == "HEAD"):
                yield piece
        except (OSError, TimeoutError, ValueError):
            return
        finally:
            writer.close()
            previews.slots.release(user_id, reading)

    response = StreamingHttpResponse(content(), status=status)
    for name, value in headers:
        response[name] = value
    if "content-type" not in every:
        del response["Content-Type"]
    return isolate(response)


@api_view("GET", session=True)
@of_conversation(READ)
async def ports_view(request: HttpRequest, conversation: Conversation) -> JsonResponse:
    """What listens in the conversation's terminal sandbox, with each port's address."""
    found = await previews.ports(conversation.id, sandboxes_for(conversation.role))
    return JsonResponse({"ports": [
        {"port": port, "url": request.build_absolute_uri(public_path(conversation.id, port))}
        for port in found
    ]})  # fmt: skip
