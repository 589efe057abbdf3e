"""Plain function views, each asking the access helper for the level it needs: reading
(the page, export), driving (the Files panel of the owner's workspace, which runs work
in), owning (rename, delete, settings, sharing). 404 for one who cannot read it, 403 for a
member whose role does not allow the action."""

from __future__ import annotations

import time

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from agent.access import (
    DRIVE,
    OWN,
    READ,
    allows,
    conversations_of,
    empty_conversation_of,
    members_of,
    new_conversation,
    own_list,
    projects_of,
    shared_list,
)
from agent.core.config import MODELS, THINKING_LEVELS
from agent.models import Conversation, Membership, User
from agent.runs import projects, search, terminals, usage
from agent.runs.branches import fork_copy, switches
from agent.runs.broadcast import interrupt_and_announce
from agent.runs.claim import RunRefused
from agent.runs.cli_sessions import agents, check_available, end_session_sync
from agent.runs.config import agent_config
from agent.runs.manager import cancel_from_sync
from agent.runs.recovery import expired
from agent.runs.sandbox import bash_mode
from agent.runs.snapshot import latest, snapshot
from agent.server.middleware import content_security_policy
from agent.ui import paging
from agent.ui.fragments import live_block, place_switches
from agent.ui.live import LiveMarkdown
from agent.ui.transcript import StatusView, Transcript
from agent.web import organize
from agent.web.organize import INSTRUCTIONS_MAX
from agent.web.reach import reach, refusal
from agent.web.sharing import ShareRefused, remove_member, set_member, set_team
from agent.web.throttle import Throttled, check_new_conversation

TITLE_MAX = 200
RUN_STOP_WAIT = 10.0  # seconds a deleted conversation's cancelled run gets to stop


def _owned_or_404(request: HttpRequest, conversation_id) -> Conversation:
    return reach(request, conversation_id, OWN)


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
    conversation = conversations_of(request.user).filter(archived=False).first()  # the newest
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
    # A long conversation's latest prompts only: enough for the parts the page shows,
    # unless they make fewer (then the whole, as short conversations always are).
    found = latest(conversation_id, request.user, paging.TAIL_EVENTS)
    if found is None:
        raise Http404("No such conversation")
    conversation, events, cut = found
    members = members_of(conversation)
    transcript, tail_switch = _transcript(conversation, events, members)
    if cut and len(transcript.parts) < paging.PAGE:
        found = snapshot(conversation_id, request.user)
        if found is None:
            raise Http404("No such conversation")
        conversation, events = found
        transcript, tail_switch = _transcript(conversation, events, members)
        cut = False
    role = conversation.role
    parts, earlier = paging.window(transcript.parts)  # the latest; earlier ones on scroll
    if cut and earlier is None and parts:
        earlier = parts[0].seq
    live = transcript.live
    # The status line shows how the last prompt ended, or what the running one is doing.
    status = transcript.status_view()
    if conversation.state == Conversation.State.IDLE:
        status = StatusView("idle", status.text if status.state == "idle" else "")
    offline = agent_config().offline
    archived_view = request.GET.get("archived") == "1"  # the list shows the archived ones
    context = {
        "conversation": conversation,
        "archived_view": archived_view,
        "conversations": own_list(request.user, archived_view)[:200],
        "max_instructions": INSTRUCTIONS_MAX,
        "projects": projects_of(request.user).order_by("name")[:200],
        "max_upload_mb": settings.HARNESS_MAX_UPLOAD_MB,  # a project's archive, said before sent
        "shared": shared_list(request.user),
        "role": role,
        "can_drive": allows(role, DRIVE),
        **(_share_context(conversation, members=members) if role == OWN else {}),
        "parts": parts,
        "earlier": earlier,
        "tail_switch": tail_switch,
        "queue": transcript.queued,
        # every part's time, for its hover title (tool cards carry no data-ts of their own)
        "part_times": _part_times(parts),
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
    }
    response = render(request, "agent/conversation.html", context)
    # Its terminals' emulator writes its own <style> texts: those, by hash, and no other.
    response["Content-Security-Policy"] = content_security_policy(terminal_styles=True)
    return response


def _transcript(conversation: Conversation, events: list, members) -> tuple[Transcript, object]:
    """The conversation's transcript as its page shows it, and the ‹ 2/3 › switcher that ends
    it (if any): the others sit on the parts they precede."""
    transcript = Transcript.of(events)
    if conversation.role != OWN or conversation.team or members:
        # A shared conversation names every prompt's author; prompts sent before it was
        # shared carry none: they were the owner's.
        for part in transcript.parts:
            if part.kind == "user" and not part.author:
                part.author = conversation.owner.get_username()
    return transcript, place_switches(transcript.parts, switches(conversation))


def _part_times(parts: list) -> dict:
    return {part.seq: part.timestamp for part in parts}


@login_required
@require_GET
def earlier_parts(request: HttpRequest, conversation_id) -> HttpResponse:
    """The page of parts before ``?before=<seq>`` (back to ``&at=<seq>`` when given), for a
    page that shows a long conversation's latest parts; who may open the page may load them."""
    try:
        before = int(request.GET["before"])
        at = int(request.GET["at"]) if request.GET.get("at") else None
    except (KeyError, ValueError):
        return HttpResponseBadRequest("before (and at) must be event numbers")
    found = snapshot(conversation_id, request.user)
    if found is None:
        raise Http404("No such conversation")
    conversation, events = found
    transcript, _ = _transcript(conversation, events, members_of(conversation))
    parts, earlier = paging.window(transcript.parts, before, at)
    return render(request, "agent/_earlier.html", {
        "conversation": conversation, "parts": parts, "earlier": earlier,
        "part_times": _part_times(parts),
    })  # fmt: skip


@login_required
@require_POST
def fork_conversation(request: HttpRequest, conversation_id) -> HttpResponse:
    """A copy of the conversation as shown, in a conversation of the user's own: any
    reader may fork, a viewer too ("Continue as a copy")."""
    conversation = reach(request, conversation_id, READ)
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
    agent = request.POST.get("agent", "harness")  # an external CLI agent
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
    title = " ".join(request.POST.get("title", "").split())[:TITLE_MAX]
    if title != conversation.title:  # (a save tells its readers' pages: revocation.py)
        conversation.title = title
        conversation.save(update_fields=["title"])  # its place among the recently active stays
    if request.headers.get("HX-Request"):
        return organize.renamed(request, conversation)
    return _back_to(request, redirect("conversation", conversation_id=conversation.id))


@login_required
@require_POST
def delete_conversation(request: HttpRequest, conversation_id) -> HttpResponse:
    conversation = _owned_or_404(request, conversation_id)
    if conversation.state == Conversation.State.RUNNING:
        cancel_from_sync(conversation.id)
        _wait_until_stopped(conversation.id)
    if conversation.agent != "harness":
        end_session_sync(conversation.id)  # its CLI's tmux session
    terminals.end_sync(conversation.id)  # its Terminal panel's shell and stream
    projects.remove_worktree(conversation)  # in a project: its worktree (the branch stays)
    conversation.delete()
    return _back_to(request, redirect("home"))


def _wait_until_stopped(conversation_id) -> None:
    """A cancelled run's last events (its ``cancelled`` status) are written as it stops: the
    conversation is deleted after them, or those writes would fail (and the delete with
    them). A run that does not stop in time is deleted under (its writes then fail)."""
    deadline = time.monotonic() + RUN_STOP_WAIT
    running = Conversation.objects.filter(pk=conversation_id, state=Conversation.State.RUNNING)
    while running.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def _budget_line(user) -> dict:
    """The sidebar's "this month: spent of budget", when the user has a budget."""
    budget = usage.budget_of(user)
    if budget is None:
        return {"budget": None}
    return {"budget": budget, "month_spent": usage.month_to_date(user.pk)}


# The approval select's labels, in APPROVAL_MODES' order.
APPROVAL_LABELS = (("auto", "Tools: run at once"), ("ask", "Tools: ask first"),
                   ("read_only", "Tools: read only"))  # fmt: skip


def _default_thinking() -> str:
    """The level the deployment's HARNESS_THINKING budget is closest to (what "" means)."""
    budget = settings.HARNESS_THINKING
    return min(THINKING_LEVELS, key=lambda level: abs(THINKING_LEVELS[level] - budget))


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


def _share_context(conversation: Conversation, error: str = "", members=None) -> dict:
    """What the owner's share dialog shows."""
    members = members_of(conversation) if members is None else members
    return {"conversation": conversation, "members": members,
            "roles": Membership.Role.choices, "share_error": error}  # fmt: skip


@login_required
@require_POST
def share(request: HttpRequest, conversation_id) -> HttpResponse:
    """The owner's share dialog: ``do`` = ``add`` (``username``, ``role``), ``remove``
    (``username``) or ``team`` (``team`` = ``on`` or absent). The dialog comes back (the page's
    transport), saying why not on bad input (nothing stored); without script, back to the page, or a
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
        # 200 either way: the transport swaps only a success, and the dialog must say why not.
        return render(request, "agent/_share.html", _share_context(conversation, error))
    if error:
        return refusal(f"Not shared: {error}", 400)
    return redirect("conversation", conversation_id=conversation.id)
