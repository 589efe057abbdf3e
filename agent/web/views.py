"""Plain function views, each asking the access helper for the level it needs: reading
(the page, export), driving (the Files panel of the owner's workspace, which runs work
in), owning (rename, delete, settings, sharing). 404 for one who cannot read it, 403 for a
member whose role does not allow the action (interfaces §12)."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import content_disposition_header, url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from agent.access import (
    DRIVE,
    OWN,
    READ,
    allows,
    conversation_for,
    conversations_of,
    empty_conversation_of,
    inspectable,
    members_of,
    new_conversation,
    shared_with,
)
from agent.core.config import APPROVAL_MODES, MODELS, THINKING_LEVELS
from agent.core.tools import PathError
from agent.models import Conversation, Membership, User
from agent.runs import attachments, search, usage
from agent.runs.branches import fork_copy, switches
from agent.runs.broadcast import interrupt_and_announce
from agent.runs.claim import RunRefused
from agent.runs.cli_sessions import agents, capture_sync, check_available, end_session_sync
from agent.runs.config import agent_config
from agent.runs.manager import cancel_from_sync
from agent.runs.recovery import expired
from agent.runs.sandbox import bash_mode
from agent.runs.snapshot import snapshot
from agent.runs.workspaces import workspace_for
from agent.ui import browse
from agent.ui.bidi import bidi_visible
from agent.ui.export import conversation_json, conversation_markdown, conversation_meta
from agent.ui.fragments import live_block, place_switches
from agent.ui.highlight import HIGHLIGHT_CAP, highlighted
from agent.ui.live import LiveMarkdown
from agent.ui.terminal import terminal_fragment
from agent.ui.transcript import StatusView, Transcript
from agent.web.sharing import ShareRefused, remove_member, set_member, set_team
from agent.web.throttle import Throttled, check_new_conversation

TITLE_MAX = 200


def _reach(request: HttpRequest, conversation_id, level: str) -> Conversation:
    """The conversation if the user's role allows ``level``; 404 when they cannot read it,
    403 when they can but their role does not allow this."""
    conversation = conversation_for(request.user, conversation_id)
    if conversation is None:
        raise Http404("No such conversation")
    if not allows(conversation.role, level):
        raise PermissionDenied("Your role on this conversation does not allow this.")
    return conversation


def _owned_or_404(request: HttpRequest, conversation_id) -> Conversation:
    return _reach(request, conversation_id, OWN)


def _back_to(request: HttpRequest, fallback) -> HttpResponse:
    """Back to the page a sidebar control was used on (``next``, this site only), else
    ``fallback``."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(target)
    return fallback


def model_choices() -> list[tuple[str, str]]:
    choices = list(MODELS)
    if settings.HARNESS_MODEL not in dict(choices):
        choices.insert(0, (settings.HARNESS_MODEL, settings.HARNESS_MODEL))
    return choices


# What an empty conversation offers to start with. The offline demo's are the requests its
# scripted model answers with real tool calls (agent/core/model/demo.py); "run ls -la"
# only when the user's runs get a bash tool (not without bubblewrap, runs/sandbox.py).
DEMO_SUGGESTIONS = ("list files", "write hello.py", "run ls -la")
DEMO_BASH_SUGGESTION = "run ls -la"


def demo_suggestions(user) -> tuple[str, ...]:
    if bash_mode(user.bash_enabled) != "off":
        return DEMO_SUGGESTIONS
    return tuple(s for s in DEMO_SUGGESTIONS if s != DEMO_BASH_SUGGESTION)


SUGGESTIONS = (
    "What is in my workspace?",
    "Write a Python script that prints the first 10 primes",
    "Find the TODO comments in my files",
)


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
    role = conversation.role
    transcript = Transcript.of(events)
    members = members_of(conversation)
    if role != OWN or conversation.team or members:
        # A shared conversation names every prompt's author; prompts sent before it was
        # shared carry none: they were the owner's.
        for part in transcript.parts:
            if part.kind == "user" and not part.author:
                part.author = conversation.owner.get_username()
    tail_switch = place_switches(transcript.parts, switches(conversation))  # ‹ 2/3 › (§11)
    live = transcript.live
    # The status line shows how the last prompt ended, or what the running one is doing.
    status = transcript.status_view()
    if conversation.state == Conversation.State.IDLE:
        status = StatusView("idle", status.text if status.state == "idle" else "")
    offline = agent_config().offline
    context = {
        "conversation": conversation,
        "conversations": conversations_of(request.user)[:200],
        "shared": shared_with(request.user)[:200],
        "role": role,
        "can_drive": allows(role, DRIVE),
        **(_share_context(conversation, members=members) if role == OWN else {}),
        "parts": transcript.parts,
        "tail_switch": tail_switch,
        "queue": transcript.queued,
        # every part's time, for its hover title (tool cards carry no data-ts of their own)
        "part_times": {part.seq: part.timestamp for part in transcript.parts},
        # A text block still streaming: shown as the live block the socket continues.
        "live_block": live_block(live.seq, LiveMarkdown.of(live.content)) if live else "",
        "status_state": status.state,
        "status_text": status.text,
        "status_code": status.code,
        "models": model_choices(),
        "thinking_levels": THINKING_LEVELS,
        **_budget_line(request.user),
        "thinking": conversation.thinking or _default_thinking(),
        "approval_modes": APPROVAL_LABELS,
        "approval": conversation.approval or settings.HARNESS_APPROVAL,
        "offline": offline,
        "suggestions": demo_suggestions(request.user) if offline else SUGGESTIONS,
        "prompt_history": request.user.prompt_history or [],
        "max_prompt": settings.HARNESS_MAX_PROMPT_CHARS,
        "themes": User.Theme.choices,
        # The CLI agents a new conversation may use (detected once a minute, cached).
        "cli_agents": [a for a in async_to_sync(agents)() if a["available"]],
        # A CLI agent's live terminal, as it is now (the socket keeps it current).
        "terminal": terminal_fragment(capture_sync(conversation.id))
        if conversation.agent != "harness"
        else "",
    }
    return render(request, "agent/conversation.html", context)


@login_required
@require_POST
def fork_conversation(request: HttpRequest, conversation_id) -> HttpResponse:
    """A copy of the conversation as shown, in a conversation of the user's own (interfaces
    §11): any reader may fork, a viewer too ("Continue as a copy")."""
    conversation = _reach(request, conversation_id, READ)
    at = request.POST.get("at")
    try:
        check_new_conversation(request.user)  # a fork is a new conversation (the same limit)
    except Throttled as refusal:
        return _throttled_page(request, refusal)
    try:
        fork = fork_copy(conversation, request.user, int(at) if at and at.isdigit() else None)
    except RunRefused as refused:
        return HttpResponse(refused.message, status=400, content_type="text/plain")
    return redirect("conversation", conversation_id=fork.id)


@login_required
@require_POST
def create_conversation(request: HttpRequest) -> HttpResponse:
    agent = request.POST.get("agent", "harness")  # an external CLI agent (interfaces §14)
    unavailable = async_to_sync(check_available)(agent)
    if unavailable is not None:
        return HttpResponseBadRequest(unavailable, content_type="text/plain; charset=utf-8")
    empty = empty_conversation_of(request.user)
    if empty is not None and empty.agent == agent:  # reused, not made: not counted
        return redirect("conversation", conversation_id=empty.id)
    try:
        check_new_conversation(request.user)  # per user and hour (agent/web/throttle.py)
    except Throttled as refusal:
        return _throttled_page(request, refusal)
    conversation = new_conversation(request.user, settings.HARNESS_MODEL, agent)
    return redirect("conversation", conversation_id=conversation.id)


@login_required
@require_POST
def rename_conversation(request: HttpRequest, conversation_id) -> HttpResponse:
    conversation = _owned_or_404(request, conversation_id)
    conversation.title = " ".join(request.POST.get("title", "").split())[:TITLE_MAX]
    conversation.save(update_fields=["title", "updated"])
    return _back_to(request, redirect("conversation", conversation_id=conversation.id))


@login_required
@require_POST
def delete_conversation(request: HttpRequest, conversation_id) -> HttpResponse:
    conversation = _owned_or_404(request, conversation_id)
    if conversation.state == Conversation.State.RUNNING:
        cancel_from_sync(conversation.id)
    if conversation.agent != "harness":
        end_session_sync(conversation.id)  # its CLI's tmux session (interfaces §14)
    conversation.delete()
    return _back_to(request, redirect("home"))


def _budget_line(user) -> dict:
    """The sidebar's "this month: spent of budget", when the user has a budget."""
    budget = usage.budget_of(user)
    if budget is None:
        return {"budget": None}
    return {"budget": budget, "month_spent": usage.month_to_date(user.pk)}


# The approval select's labels (interfaces §9), in APPROVAL_MODES' order.
APPROVAL_LABELS = (("auto", "Tools: run at once"), ("ask", "Tools: ask first"),
                   ("read_only", "Tools: read only"))  # fmt: skip


def _default_thinking() -> str:
    """The level the deployment's HARNESS_THINKING budget is closest to (what "" means)."""
    budget = settings.HARNESS_THINKING
    return min(THINKING_LEVELS, key=lambda level: abs(THINKING_LEVELS[level] - budget))


def _set_choice(request: HttpRequest, conversation_id, field: str, choices) -> HttpResponse:
    """A conversation's setting from the page's select (``data-autosubmit``: 204 or 400, the
    page stays where it is) or, without script, its form (back to the conversation)."""
    conversation = _owned_or_404(request, conversation_id)
    value = request.POST.get(field, "")
    known = value in choices
    if known:
        setattr(conversation, field, value)
        conversation.save(update_fields=[field, "updated"])
    if request.headers.get("HX-Request"):
        return HttpResponse(status=204 if known else 400)
    return redirect("conversation", conversation_id=conversation.id)


@login_required
@require_POST
def set_model(request: HttpRequest, conversation_id) -> HttpResponse:
    return _set_choice(request, conversation_id, "model", dict(model_choices()))


@login_required
@require_POST
def set_thinking(request: HttpRequest, conversation_id) -> HttpResponse:
    return _set_choice(request, conversation_id, "thinking", THINKING_LEVELS)


@login_required
@require_GET
def search_view(request: HttpRequest) -> HttpResponse:
    """The sidebar's search: its results as a fragment (a page of them without script)."""
    query = request.GET.get("q", "")[: search.MAX_QUERY]
    results = search.search(request.user.pk, query) if query.strip() else []
    context = {"query": query if query.strip() else None, "results": results}
    if request.headers.get("HX-Request"):
        return render(request, "agent/_search_results.html", context)
    return render(request, "agent/search.html", context)


@login_required
@require_POST
def set_approval(request: HttpRequest, conversation_id) -> HttpResponse:
    return _set_choice(request, conversation_id, "approval", APPROVAL_MODES)


@login_required
@require_POST
def set_theme(request: HttpRequest) -> HttpResponse:
    """The account's theme (system, light or dark): every page renders it into
    ``<html data-theme>``. The page's switch saves in the background (204); without
    script the form posts and comes back to ``next``."""
    theme = request.POST.get("theme", "")
    if theme not in User.Theme.values:
        return HttpResponse("Unknown theme", status=400, content_type="text/plain")
    request.user.theme = theme
    request.user.save(update_fields=["theme"])
    if request.headers.get("HX-Request"):
        return HttpResponse(status=204)
    return _back_to(request, redirect("home"))


EXPORTS = {
    "md": ("text/markdown", conversation_markdown),
    "json": ("application/json", conversation_json),
}


@login_required
@require_GET
def export_conversation(request: HttpRequest, conversation_id, extension: str) -> HttpResponse:
    """A conversation one may read as a Markdown or JSON download (others' are 404)."""
    conversation = _reach(request, conversation_id, READ)
    kind, render_export = EXPORTS[extension]
    events = list(conversation.events.order_by("seq").values_list("payload", flat=True))
    response = HttpResponse(
        render_export(conversation_meta(conversation), events),
        content_type=f"{kind}; charset=utf-8",
    )
    name = f"conversation-{conversation.id}.{extension}"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@login_required
@require_GET
def workspace_files(request: HttpRequest, conversation_id=None) -> HttpResponse:
    """The signed-in user's workspace: a directory listing or a file view (read-only).
    Loaded into a conversation's side panel by htmx (``/c/<id>/files/``, with download
    links), or shown as a page on its own (``/files/``)."""
    context: dict = {"error": None, "files_url": reverse("files"), "download_url": "",
                     "download_cap": browse.DOWNLOAD_CAP}  # fmt: skip
    owner_id = request.user.pk
    if conversation_id is not None:  # the workspace its runs work in: the owner's
        conversation = _reach(request, conversation_id, DRIVE)
        owner_id = conversation.owner_id
        context["files_url"] = reverse("conversation_files", args=[conversation.id])
        context["download_url"] = reverse("download_file", args=[conversation.id])
    workspace = workspace_for(owner_id)
    path = request.GET.get("path", "")
    try:
        rel, shown, truncated = browse.browse(workspace, path)
        context["crumbs"] = browse.crumbs(rel)
        if isinstance(shown, browse.FileView):
            context["file"] = shown
            if shown.text is not None:  # highlighted by its name's type, up to the cap
                context["file_html"] = highlighted(shown.text, shown.path)
                context["too_long_to_highlight"] = len(shown.text) > HIGHLIGHT_CAP
        else:
            context["entries"], context["truncated"] = shown, truncated
    except PathError as exc:
        context.update(error=str(exc), crumbs=browse.crumbs(""))
    template = "agent/_files.html" if request.headers.get("HX-Request") else "agent/files.html"
    status = 404 if context["error"] else 200
    return render(request, template, context, status=status)


def _refusal(message: str, status: int) -> HttpResponse:
    response = HttpResponse(message + "\n", content_type="text/plain; charset=utf-8", status=status)
    response["X-Content-Type-Options"] = "nosniff"
    return response


@login_required
@require_GET
def download_file(request: HttpRequest, conversation_id) -> HttpResponse:
    """A file of the conversation's workspace (its owner's) as an attachment, from its Files
    panel (owner and collaborators).
    Read through the descriptor walk (no symlink out, no FIFO or device, at most
    ``browse.DOWNLOAD_CAP``) and never served as something a browser would render here: an
    octet stream, ``nosniff``, and a sandboxing CSP should it be opened anyway."""
    conversation = _reach(request, conversation_id, DRIVE)
    workspace = workspace_for(conversation.owner_id)  # the one its runs work in
    try:
        rel, data = browse.download(workspace, request.GET.get("path", ""))
    except browse.TooLarge as exc:
        return _refusal(f"Not downloaded: {exc}.", 413)
    except PathError as exc:
        return _refusal(f"Not downloaded: {exc}.", 404)
    return download_response(rel, data)


@login_required
@require_GET
def conversation_image(request: HttpRequest, conversation_id, sha256: str) -> HttpResponse:
    """An image attached to one of the conversation's prompts (interfaces §13), for its
    thumbnail: the snapshot taken when it was sent, recognised then as a PNG, JPEG, GIF or
    WebP by its bytes, served as exactly that type with ``nosniff`` and a sandboxing CSP
    (a browser shows it as an image or not at all; never a document of this origin)."""
    conversation = inspectable(request.user, conversation_id)
    image = attachments.image(conversation.id, sha256) if conversation is not None else None
    if image is None:
        raise Http404("No such image")
    etag = f'"{image.sha256}"'
    if request.headers.get("If-None-Match") == etag:  # (access was checked again above)
        response = HttpResponse(status=304)
        response["ETag"] = etag
        return response
    name = f"{sha256[:12]}.{image.media_type.rsplit('/', 1)[-1]}"
    # Kept by the browser, but asked again each time: a member removed sees it no more.
    response = _inert(bytes(image.data), image.media_type, name, attachment=False,
                      cache="private, no-cache")  # fmt: skip
    response["ETag"] = etag
    return response


def _inert(data: bytes, content_type: str, name: str, *, attachment: bool,
           cache: str) -> HttpResponse:  # fmt: skip
    """Bytes from a workspace that no browser renders as a document of this origin: the
    type as given, ``nosniff``, and a sandboxing CSP should it be opened anyway."""
    response = HttpResponse(data, content_type=content_type)
    response["Content-Disposition"] = content_disposition_header(attachment, name)
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "sandbox; default-src 'none'"
    response["Cache-Control"] = cache
    return response


def download_response(rel: str, data: bytes) -> HttpResponse:
    """A workspace file as an attachment that no browser renders on this origin (the page's
    download and ``GET /api/files/…`` alike)."""
    # Saved under the name shown in the panel: a bidi control cannot make the browser's
    # download bar show "invoiceexe.pdf" for an .exe.
    name = bidi_visible(rel.rsplit("/", 1)[-1]) or "download"
    return _inert(data, "application/octet-stream", name, attachment=True,
                  cache="private, no-store")  # fmt: skip


def _share_context(conversation: Conversation, error: str = "", members=None) -> dict:
    """What the owner's share dialog shows."""
    members = members_of(conversation) if members is None else members
    return {"conversation": conversation, "members": members,
            "roles": Membership.Role.choices, "share_error": error}  # fmt: skip


@login_required
@require_POST
def share(request: HttpRequest, conversation_id) -> HttpResponse:
    """The owner's share dialog: ``do`` = ``add`` (``username``, ``role``), ``remove``
    (``username``) or ``team`` (``team`` = ``on`` or absent). The dialog comes back (htmx),
    saying why not on bad input (nothing stored); without script, back to the page, or a
    400 saying why not."""
    conversation = _owned_or_404(request, conversation_id)
    action, username = request.POST.get("do", ""), request.POST.get("username", "").strip()
    error = ""
    try:
        if action == "add":
            set_member(conversation, username, request.POST.get("role", ""))
        elif action == "remove":
            remove_member(conversation, username)
        elif action == "team":
            set_team(conversation, request.POST.get("team") == "on")
        else:
            error = "Unknown sharing action."
    except ShareRefused as refused:
        error = refused.message
    if request.headers.get("HX-Request"):
        # 200 either way: htmx swaps only a success, and the dialog must say why not.
        return render(request, "agent/_share.html", _share_context(conversation, error))
    if error:
        return _refusal(f"Not shared: {error}", 400)
    return redirect("conversation", conversation_id=conversation.id)
