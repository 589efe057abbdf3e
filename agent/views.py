"""Plain function views with explicit owner checks."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from . import browse, storage
from .config import MODELS
from .conversations import (
    _get_conversation_for_user,
    conversations_of,
    new_conversation,
    snapshot,
)
from .models import Conversation
from .recovery import expired
from .runs import cancel_from_sync, interrupt_and_announce
from .runtime import agent_config
from .throttle import Throttled, check_new_conversation
from .tools import PathError
from .transcript import build_parts, status_text
from .workspaces import workspace_for

TITLE_MAX = 200


def _owned_or_404(request: HttpRequest, conversation_id) -> Conversation:
    conversation = _get_conversation_for_user(conversation_id, request.user)
    if conversation is None:
        raise Http404("No such conversation")
    return conversation


def model_choices() -> list[tuple[str, str]]:
    choices = list(MODELS)
    if settings.HARNESS_MODEL not in dict(choices):
        choices.insert(0, (settings.HARNESS_MODEL, settings.HARNESS_MODEL))
    return choices


def _throttled_page(request: HttpRequest, refusal: Throttled) -> HttpResponse:
    response = render(request, "agent/throttled.html", {"message": refusal.message}, status=429)
    response["Retry-After"] = str(refusal.retry_after)
    return response


@login_required
def home(request: HttpRequest) -> HttpResponse:
    conversation = conversations_of(request.user).first()
    if conversation is None:
        try:  # counted too: deleting every conversation must not get around the limit
            check_new_conversation(request.user)
        except Throttled as refusal:
            return _throttled_page(request, refusal)
        conversation = new_conversation(request.user, settings.HARNESS_MODEL)
    return redirect("conversation", conversation_id=conversation.id)


@login_required
def conversation_page(request: HttpRequest, conversation_id) -> HttpResponse:
    # A run whose process died shows as ended (and open pages are told).
    interrupt_and_announce(expired().filter(id=conversation_id, owner=request.user))
    found = snapshot(conversation_id, request.user)
    if found is None:
        raise Http404("No such conversation")
    conversation, events = found
    partial = [e for e in events if e["type"] == "text_delta"]
    status = next((e for e in reversed(events) if e["type"] == "status"), None)
    # The status line shows how the last prompt ended, or what the running one is doing.
    state = status["state"] if status else "idle"
    if conversation.state == Conversation.State.IDLE:
        state = "idle"
    context = {
        "conversation": conversation,
        "conversations": conversations_of(request.user)[:200],
        "parts": build_parts(events),
        # A text block still streaming: shown as the live block the socket continues.
        "live_text": "".join(e["content"] for e in partial),
        "live_seq": partial[0]["seq"] if partial else 0,
        "status_state": state,
        "status_text": status_text(state, status.get("message") if status else None),
        "models": model_choices(),
        "offline": agent_config().offline,
        "prompt_history": request.user.prompt_history or [],
        "max_prompt": settings.HARNESS_MAX_PROMPT_CHARS,
    }
    return render(request, "agent/conversation.html", context)


@login_required
@require_POST
def create_conversation(request: HttpRequest) -> HttpResponse:
    try:
        check_new_conversation(request.user)  # per user and hour (agent/throttle.py)
    except Throttled as refusal:
        return _throttled_page(request, refusal)
    conversation = new_conversation(request.user, settings.HARNESS_MODEL)
    return redirect("conversation", conversation_id=conversation.id)


@login_required
@require_POST
def rename_conversation(request: HttpRequest, conversation_id) -> HttpResponse:
    conversation = _owned_or_404(request, conversation_id)
    conversation.title = " ".join(request.POST.get("title", "").split())[:TITLE_MAX]
    conversation.save(update_fields=["title", "updated"])
    return redirect("conversation", conversation_id=conversation.id)


@login_required
@require_POST
def delete_conversation(request: HttpRequest, conversation_id) -> HttpResponse:
    conversation = _owned_or_404(request, conversation_id)
    if conversation.state == Conversation.State.RUNNING:
        cancel_from_sync(conversation.id)
    conversation.delete()
    return redirect("home")


@login_required
@require_POST
def set_model(request: HttpRequest, conversation_id) -> HttpResponse:
    conversation = _owned_or_404(request, conversation_id)
    model = request.POST.get("model", "")
    if model in dict(model_choices()):
        conversation.model = model
        conversation.save(update_fields=["model", "updated"])
    return redirect("conversation", conversation_id=conversation.id)


@login_required
@require_GET
def workspace_files(request: HttpRequest) -> HttpResponse:
    """The signed-in user's workspace: a directory listing or a file view (read-only).
    Loaded into the chat's side panel by htmx, or shown as a page on its own."""
    workspace = workspace_for(request.user.pk)
    path = request.GET.get("path", "")
    context: dict = {"error": None}
    try:
        rel, shown, truncated = browse.browse(workspace, path)
        context["crumbs"] = browse.crumbs(rel)
        if isinstance(shown, browse.FileView):
            context["file"] = shown
        else:
            context["entries"], context["truncated"] = shown, truncated
    except PathError as exc:
        context.update(error=str(exc), crumbs=browse.crumbs(""))
    template = "agent/_files.html" if request.headers.get("HX-Request") else "agent/files.html"
    status = 404 if context["error"] else 200
    return render(request, template, context, status=status)


async def _channel_layer_roundtrip() -> None:
    layer = get_channel_layer()
    async with asyncio.timeout(3):
        channel = await layer.new_channel()  # with Redis: a SUBSCRIBE, a round trip
        try:
            await layer.send(channel, {"type": "health.ping"})
            assert (await layer.receive(channel))["type"] == "health.ping"
        finally:
            if hasattr(layer, "release"):  # a pub/sub channel stays subscribed otherwise
                await layer.release(channel)


def _write_probe(directory: Path) -> None:
    """Create, write, fsync and delete a small file: what the server's own writes need."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".healthz-", dir=directory)
    try:
        os.write(fd, b"\0" * 4096)
        os.fsync(fd)
    finally:
        os.close(fd)
        os.unlink(name)


def _free_space(path: Path) -> str:
    st = os.statvfs(storage.existing(path))
    free_mb = st.f_bavail * st.f_frsize // (1024 * 1024)
    if free_mb < settings.HARNESS_MIN_FREE_MB or (st.f_files and not st.f_favail):
        return f"error: disk full ({free_mb} MB free, minimum {settings.HARNESS_MIN_FREE_MB} MB)"
    return "ok"


def _disk_checks() -> dict[str, str]:
    """The disks the server writes to: var/ must take a write, and var/'s, the SQLite
    database's and the workspaces' file systems must have HARNESS_MIN_FREE_MB free (a
    full one fails every user's requests, or every run)."""
    checks = {}
    try:
        _write_probe(Path(settings.VAR_DIR))
        checks["state_dir"] = _free_space(Path(settings.VAR_DIR))
    except OSError as exc:
        checks["state_dir"] = f"error: cannot write: {os.strerror(exc.errno or 0)}"
    targets = {"workspaces_disk": Path(settings.HARNESS_WORKSPACES)}
    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        targets["database_disk"] = Path(str(database["NAME"])).parent
    for name, path in targets.items():
        try:
            checks[name] = _free_space(path)
        except OSError as exc:
            checks[name] = f"error: {os.strerror(exc.errno or 0)}"
    return checks


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    checks = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # the point is to report any failure
        checks["database"] = f"error: {type(exc).__name__}"
    try:
        async_to_sync(_channel_layer_roundtrip)()
        checks["channel_layer"] = "ok"
    except Exception as exc:
        checks["channel_layer"] = f"error: {type(exc).__name__}"
    checks.update(_disk_checks())
    healthy = all(v == "ok" for v in checks.values())
    status = 200 if healthy else 503
    return JsonResponse({"status": "ok" if healthy else "error", **checks}, status=status)
