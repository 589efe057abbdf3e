"""The HTTP + SSE API (interfaces §5): the seed protocol, per conversation.

Authenticated with ``Authorization: Bearer <token>`` on every request; every answer about
another user's conversation is 404; errors are JSON ``{"error", "message"}``. The event
stream replays stored events after ``Last-Event-ID`` / ``?since`` and then goes live, with
no gap and no duplicate (it joins the live group before reading the log, and skips by seq).
An open stream ends when its token is revoked or its user deactivated: a message through
the channel layer (agent/web/revocation.py), and a re-check of the token at every heartbeat and
at most once a second while events flow. Too many bad tokens from one address, and too
many new conversations from one user, get 429 ``throttled`` (agent/web/throttle.py).
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from functools import partial, wraps
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from agent.access import DRIVE, OWN, READ, allows, conversation_for, listed_for, new_conversation
from agent.core.config import APPROVAL_MODES, THINKING_LEVELS
from agent.core.events import BranchEvent
from agent.models import Conversation
from agent.runs import search, usage
from agent.runs.branches import fork_copy, resume_point
from agent.runs.branches import listing as branch_listing
from agent.runs.claim import RunRefused
from agent.runs.cli_sessions import agents, check_available
from agent.runs.groups import group_name
from agent.runs.manager import runs
from agent.runs.snapshot import snapshot
from agent.server import metrics
from agent.server.user_connections import Slot, connections, refused_message
from agent.web.api_tokens import token_for_header, token_still_valid
from agent.web.prompts import (
    accept_prompt,
    decide_approval,
    regenerate,
    remove_queued,
    start_compaction,
    switch_branch,
)
from agent.web.revocation import token_group, user_group
from agent.web.sharing import ShareRefused, remove_member, set_member, set_team
from agent.web.throttle import (
    Throttled,
    check_new_conversation,
    token_failed,
    token_failures_blocked,
)
from agent.web.views import TITLE_MAX, model_choices

REFUSAL_STATUS = {"prompt_running": 409, "quota_concurrent": 429, "quota_rate": 429,
                  "not_found": 404, "forbidden": 403, "storage_full": 507,
                  "prompt_too_large": 400, "bad_mode": 400, "queue_full": 429,
                  "budget_exceeded": 429, "already_decided": 409, "bad_image": 400,
                  "quota_exceeded": 413}  # fmt: skip


# An open stream re-checks its token at most this often (seconds) while events flow.
RECHECK_INTERVAL = 1.0


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


def api_view(*methods: str):
    """Check the method and the bearer token (``request.api_user``) for a sync or async
    view; tokens, not cookies, so no CSRF."""

    def decorate(view):
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


def _json_body(request: HttpRequest) -> dict[str, Any] | None:
    try:
        body = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) else None


def one_of(value, choices) -> bool:
    """Whether ``value`` is one of ``choices`` (strings). A string first: JSON gives lists
    and objects too, and asking a dict or set about one raises (a 500, not a 400)."""
    return isinstance(value, str) and value in choices


def _conversation_json(c: Conversation) -> dict[str, Any]:
    """A conversation in a list: with the caller's ``role`` (interfaces §12)."""
    return {"id": str(c.id), "title": c.title, "created": c.created.isoformat(), "state": c.state,
            "role": getattr(c, "role", "owner")}  # fmt: skip


def _conversation_detail(c: Conversation) -> dict[str, Any]:
    """One conversation, with its settings (``thinking`` null: the deployment's default)."""
    return {**_conversation_json(c), "model": c.model, "thinking": c.thinking or None,
            "approval": c.approval or settings.HARNESS_APPROVAL, "team": c.team,
            "agent": c.agent}  # fmt: skip


@api_view("GET", "POST")
def conversations(request: HttpRequest) -> JsonResponse:
    if request.method == "GET":  # own and shared ones, each with the caller's role
        items = [_conversation_json(c) for c in listed_for(request.api_user)[:1000]]
        return JsonResponse({"conversations": items})
    body = _json_body(request)
    if body is None:
        return api_error(400, "bad_request", "The body must be a JSON object.")
    title, model = body.get("title", ""), body.get("model", settings.HARNESS_MODEL)
    if not isinstance(title, str) or len(title) > TITLE_MAX:
        return api_error(400, "bad_request", f"'title' must be a string of at most {TITLE_MAX}.")
    if not one_of(model, dict(model_choices())):
        return api_error(400, "bad_request", f"Unknown model {str(model)[:100]!r}.")
    agent = body.get("agent", "harness")
    if not isinstance(agent, str):
        return api_error(400, "bad_request", "'agent' must be a string.")
    unavailable = async_to_sync(check_available)(agent)
    if unavailable is not None:
        return api_error(400, "agent_unavailable", unavailable)
    try:
        check_new_conversation(request.api_user)
    except Throttled as refusal:
        return throttled(refusal)
    conversation = new_conversation(request.api_user, model, agent)
    if title.strip():
        conversation.title = " ".join(title.split())
        conversation.save(update_fields=["title"])
    return JsonResponse({"id": str(conversation.id)}, status=201)


@api_view("GET")
async def agents_view(request: HttpRequest) -> JsonResponse:
    """The external CLI agents and whether each can be used here (interfaces §14)."""
    return JsonResponse({"agents": await agents()})


@api_view("GET")
def usage_view(request: HttpRequest) -> JsonResponse:
    """The caller's spend this month, their budget and the last 31 days (interfaces §13)."""
    return JsonResponse(usage.report(request.api_user))


@api_view("GET")
def search_view(request: HttpRequest) -> JsonResponse:
    """Prompts and answers of the caller's conversations matching ``q`` (interfaces §13)."""
    query = request.GET.get("q", "")
    if not query.strip() or len(query) > search.MAX_QUERY:
        return api_error(400, "bad_request", f"'q' must be 1 to {search.MAX_QUERY} characters.")
    return JsonResponse({"results": [f.plain() for f in search.search(request.api_user.pk, query)]})


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


@api_view("POST")
@of_conversation(DRIVE)
async def prompt(request: HttpRequest, conversation: Conversation) -> JsonResponse:
    body = _json_body(request) or {}
    content, mode = body.get("content"), body.get("mode")
    try:
        queued = await accept_prompt(conversation.id, request.api_user, content, mode,
                                     edit_of=body.get("edit_of"),
                                     images=body.get("images"))  # fmt: skip
    except RunRefused as refused:
        if refused.code == "empty_prompt":  # here: a body without a prompt's text
            return api_error(400, "bad_request", 'The body must be {"content": "<prompt>"}.')
        if refused.code == "bad_mode":
            return api_error(400, "bad_request", refused.message)
        return api_error(REFUSAL_STATUS.get(refused.code, 400), refused.code, refused.message)
    answer = {"accepted": True} if queued is None else {"accepted": True, "queued": queued}
    return JsonResponse(answer, status=202)


@api_view("POST")
@of_conversation(DRIVE)
async def regenerate_view(request: HttpRequest, conversation: Conversation) -> JsonResponse:
    """Answer a prompt again on a new branch (interfaces §11): 202; 409 while one runs."""
    body = _json_body(request)
    if body is None and request.body.strip():
        return api_error(400, "bad_request", 'The body must be JSON: {"of"?: <seq>}.')
    try:
        await regenerate(conversation.id, request.api_user, (body or {}).get("of"))
    except RunRefused as refused:
        return api_error(REFUSAL_STATUS.get(refused.code, 400), refused.code, refused.message)
    return JsonResponse({"accepted": True}, status=202)


@api_view("GET")
@of_conversation(READ)
async def branches_view(request: HttpRequest, conversation: Conversation) -> JsonResponse:
    listed = await sync_to_async(branch_listing, thread_sensitive=False)(conversation)
    return JsonResponse({"branches": listed})


@api_view("POST")
@of_conversation(DRIVE)
async def activate_branch(
    request: HttpRequest, conversation: Conversation, branch: int
) -> JsonResponse:
    try:
        fork = await switch_branch(conversation.id, request.api_user, branch)
    except RunRefused as refused:
        return api_error(REFUSAL_STATUS.get(refused.code, 400), refused.code, refused.message)
    return JsonResponse({"active": branch, "fork_seq": fork})


@api_view("POST")
@of_conversation(READ)
async def fork_view(request: HttpRequest, conversation: Conversation) -> JsonResponse:
    """A copy of the active branch up to ``at``, owned by the caller (interfaces §11): any
    reader may fork, a viewer included; the copy is theirs, in their own workspace."""
    body = _json_body(request)
    if body is None and request.body.strip():
        return api_error(400, "bad_request", 'The body must be JSON: {"at"?: <seq>}.')
    try:  # a fork is a new conversation: the same hourly limit
        await sync_to_async(check_new_conversation)(request.api_user)
    except Throttled as refusal:
        return throttled(refusal)
    try:
        fork = await sync_to_async(fork_copy, thread_sensitive=False)(
            conversation, request.api_user, (body or {}).get("at")
        )
    except RunRefused as refused:
        return api_error(REFUSAL_STATUS.get(refused.code, 400), refused.code, refused.message)
    return JsonResponse({"id": str(fork.id)}, status=201)


@api_view("DELETE")
@of_conversation(DRIVE)
async def unqueue(request: HttpRequest, conversation: Conversation, queue_id: str) -> HttpResponse:
    """Remove a queued prompt (interfaces §8): 204, or 404 when it is not waiting (unknown,
    delivered already, or dropped with its run)."""
    running = conversation.state == Conversation.State.RUNNING
    if not await remove_queued(conversation.id, queue_id, running=running):
        return api_error(404, "not_found", "No such prompt in the queue (it may have been sent).")
    return HttpResponse(status=204)


@api_view("POST")
@of_conversation(DRIVE)
async def approval(request: HttpRequest, conversation: Conversation, call_id: str) -> JsonResponse:
    """Approve or deny a tool call waiting for a decision (interfaces §9): 200; 404 when no
    such call waits; 409 when it was already decided. ``"approve_all": true`` also approves
    the run's later calls."""
    body = _json_body(request)
    if body is None:
        return api_error(400, "bad_request", "The body must be a JSON object.")
    try:
        await decide_approval(
            conversation.id, request.api_user, call_id, body.get("decision"), body.get("reason"),
            approve_all=body.get("approve_all") is True,
            running=conversation.state == Conversation.State.RUNNING,
        )  # fmt: skip
    except RunRefused as refused:
        return api_error(REFUSAL_STATUS.get(refused.code, 400), refused.code, refused.message)
    return JsonResponse({"decided": True, "decision": body["decision"]})


@api_view("GET", "PATCH")
@of_conversation(READ, PATCH=OWN)
async def conversation(request: HttpRequest, conversation: Conversation) -> JsonResponse:
    """One conversation's JSON; PATCH (the owner only) changes its title, model, thinking
    level or approval (from the next prompt on) or opens it to the team. Nothing is
    changed unless every given value is valid."""
    if request.method == "GET":
        return JsonResponse(_conversation_detail(conversation))
    body = _json_body(request)
    if body is None:
        return api_error(400, "bad_request", "The body must be a JSON object.")
    changes, problem = conversation_changes(body)
    if problem:
        return api_error(400, "bad_request", problem)
    team = changes.pop("team", None)
    if changes:
        for name, value in changes.items():
            setattr(conversation, name, value)
        await conversation.asave(update_fields=[*changes, "updated"])
    if team is not None:  # closing it re-checks every reader's connections
        await sync_to_async(set_team)(conversation, team)
    return JsonResponse(_conversation_detail(conversation))


def conversation_changes(body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The fields a PATCH body sets, or what is wrong with it."""
    changes: dict[str, Any] = {}
    for key, value in body.items():
        if key == "title":
            if not isinstance(value, str) or len(value) > TITLE_MAX:
                return {}, f"'title' must be a string of at most {TITLE_MAX} characters."
            changes["title"] = " ".join(value.split())
        elif key == "model":
            if not one_of(value, dict(model_choices())):
                return {}, f"Unknown model {str(value)[:100]!r}."
            changes["model"] = value
        elif key == "thinking":
            if not one_of(value, THINKING_LEVELS):
                return {}, f"'thinking' must be one of {', '.join(THINKING_LEVELS)}."
            changes["thinking"] = value
        elif key == "approval":
            if not one_of(value, APPROVAL_MODES):
                return {}, f"'approval' must be one of {', '.join(APPROVAL_MODES)}."
            changes["approval"] = value
        elif key == "team":
            if not isinstance(value, bool):
                return {}, "'team' must be true or false."
            changes["team"] = value
        else:
            return {}, f"Unknown field {str(key)[:100]!r}."
    return changes, ""


@api_view("POST")
@of_conversation(DRIVE)
async def compact(request: HttpRequest, conversation: Conversation) -> JsonResponse:
    """Compact the history now: 202, then a ``compaction`` event and an idle status on the
    stream (409 while a prompt runs)."""
    try:
        await start_compaction(conversation.id, request.api_user)
    except RunRefused as refused:
        return api_error(REFUSAL_STATUS.get(refused.code, 400), refused.code, refused.message)
    return JsonResponse({"accepted": True}, status=202)


@api_view("POST")
@of_conversation(DRIVE)
async def cancel(request: HttpRequest, conversation: Conversation) -> JsonResponse:
    if conversation.state != Conversation.State.RUNNING:
        return JsonResponse({"cancelled": False})
    await runs.cancel(conversation.id)  # here or, through the channel layer, elsewhere
    return JsonResponse({"cancelled": True})


@api_view("GET")
@of_conversation(OWN)
async def members(request: HttpRequest, conversation: Conversation) -> JsonResponse:
    """The conversation's members and whether the team may read it (the owner only)."""
    found = await sync_to_async(_members_json)(conversation)
    return JsonResponse({"members": found, "team": conversation.team})


def _members_json(conversation: Conversation) -> list[dict[str, str]]:
    rows = conversation.memberships.order_by("user__username").values_list("user__username", "role")
    return [{"username": name, "role": role} for name, role in rows]


@api_view("PUT", "DELETE")
@of_conversation(OWN)
async def member(request: HttpRequest, conversation: Conversation, username: str) -> HttpResponse:
    """Grant a user a role on the conversation (``PUT {"role": "viewer" | "collaborator"}``:
    200) or take it away (``DELETE``: 204; their sockets and streams close at once).
    Unknown users, the owner themself and unknown roles: 400, nothing stored."""
    if request.method == "DELETE":
        if not await sync_to_async(remove_member)(conversation, username):
            return api_error(404, "not_found", "That user is not a member of this conversation.")
        return HttpResponse(status=204)
    body = _json_body(request)
    if body is None:
        return api_error(400, "bad_request", 'The body must be {"role": "viewer"} or similar.')
    try:
        found = await sync_to_async(set_member)(conversation, username, body.get("role"))
    except ShareRefused as refused:
        return api_error(400, refused.code, refused.message)
    return JsonResponse({"username": username, "role": found.role})


def _since(request: HttpRequest) -> int | None:
    raw = request.headers.get("Last-Event-ID") or request.GET.get("since") or "0"
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value >= 0 else None


def _frame(event: dict[str, Any]) -> str:
    return f"id: {event['seq']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"


@api_view("GET")
@of_conversation(READ)
async def events(request: HttpRequest, conversation: Conversation) -> HttpResponse:
    since = _since(request)
    if since is None:
        return api_error(400, "bad_request", "Last-Event-ID / since must be a whole number.")
    # ?branch=<id>: another branch's path, read as it is (interfaces §11); by default the
    # active one's, following switches.
    branch = request.GET.get("branch")
    if branch is not None:
        if not branch.isdigit():
            return api_error(400, "bad_request", "branch must be a branch id (a whole number).")
        branch = int(branch)
        known = await sync_to_async(branch_listing, thread_sensitive=False)(conversation)
        if branch not in {b["id"] for b in known}:
            return api_error(404, "not_found", "This conversation has no such branch.")
    user, token_id = request.api_user, request.api_token_id
    # One live connection more for the user (agent/server/user_connections.py), shared
    # with their page sockets; their open streams are not touched by a refusal.
    slot = connections.take(user.pk)
    if slot is None:
        metrics.CONNECTIONS_REFUSED.inc(label="event_stream")
        return api_error(429, "too_many_connections", refused_message())
    try:
        return await _event_stream(conversation, user, token_id, since, branch, slot)
    except BaseException:  # an error or a cancel before the response exists
        slot.release()
        raise


class EventStream(StreamingHttpResponse):
    """An event stream's response, holding its user's connection slot. The stream gives
    it back when it ends; Django's ``close()`` when the stream never started (the client
    left before the first byte); and, should the response be dropped unclosed, its
    finalizer. ``Slot.release`` counts once."""

    def __init__(self, content, slot: Slot, **kwargs):
        super().__init__(content, **kwargs)
        self.slot = slot
        weakref.finalize(self, slot.release)

    def close(self) -> None:
        self.slot.release()
        super().close()


async def _event_stream(conversation: Conversation, user, token_id: int, since: int,
                        branch: int | None, slot: Slot) -> HttpResponse:  # fmt: skip
    await runs.start_background()  # this process's cancel listener and run reaper
    layer = get_channel_layer()
    channel = await layer.new_channel()
    # The user's group: deactivation; the token's: its revocation (agent/web/revocation.py).
    groups = [group_name(conversation.id), user_group(user.pk), token_group(token_id)]
    for group in groups:  # join before reading the log: nothing can fall in between
        await layer.group_add(group, channel)
    heartbeat = settings.HARNESS_SSE_HEARTBEAT
    # Token unrevoked, user active, conversation still theirs: one query, off the loop.
    still_valid = partial(database_sync_to_async(token_still_valid, thread_sensitive=False),
                          token_id, conversation.id)  # fmt: skip

    async def replay(after: int) -> tuple[list[str], int]:
        found = await sync_to_async(snapshot)(conversation.id, user, after, branch)
        if found is None:
            return [], -1
        current, events = found
        frames = []
        if branch is None:
            # A reader holding another branch than the active one: told where they part,
            # then given the active branch from there.
            parted = await sync_to_async(resume_point, thread_sensitive=False)(current, after)
            if parted is not None:
                frames.append(_frame(BranchEvent(seq=parted, active=current.active_branch,
                                                 fork_seq=parted).to_dict()))  # fmt: skip
                found = await sync_to_async(snapshot)(conversation.id, user, parted)
                if found is None:
                    return [], -1
                current, events = found
                after = parted
        frames += [_frame(e.to_dict()) for e in events if e.seq > after]
        return frames, current.last_seq

    async def stream():
        # One receive outlives heartbeats: cancelling a receive makes channels-redis's
        # pub/sub layer drop the channel (what arrives meanwhile would be lost).
        receiving = None
        # While events flow, the token is re-checked beside them (a round trip must not
        # hold frames up): started at most once a second, its answer read at the next
        # message or heartbeat, so at most a second's events follow a revocation.
        checking, checked_at = None, time.monotonic()
        try:
            # Daphne sends the response's headers with its first bytes: without this, a
            # client of a quiet conversation would wait a whole heartbeat to see the 200.
            yield ": connected\n\n"
            frames, sent = await replay(since)
            for frame in frames:
                yield frame
            sent = max(sent, since)
            while sent >= 0:
                receiving = receiving or asyncio.ensure_future(layer.receive(channel))
                done, _ = await asyncio.wait({receiving}, timeout=heartbeat)
                if checking is not None and checking.done():
                    if not checking.result():
                        return  # revoked, deactivated or deleted since the last check
                    checking = None
                if done:
                    message, receiving = receiving.result(), None
                else:
                    checked_at = time.monotonic()
                    if not await still_valid():
                        return  # revoked, deactivated, or the conversation deleted
                    yield ": heartbeat\n\n"
                    continue
                if message.get("type") in ("user.revoked", "token.revoked"):
                    return
                if message.get("type") == "access.recheck":  # sharing changed (§12)
                    checked_at = time.monotonic()
                    if not await still_valid():
                        return
                    continue
                if message.get("type") == "conversation.branch":
                    if branch is not None:
                        continue  # a stream of one named branch is not moved
                    # Another branch is shown: what follows the parting point is replaced.
                    parted = message["fork_seq"]
                    yield _frame(BranchEvent(seq=parted, active=message["active"],
                                             fork_seq=parted).to_dict())  # fmt: skip
                    for event in message["events"]:
                        yield _frame(event)
                    sent = max([parted, *(e["seq"] for e in message["events"])])
                    continue
                if message.get("type") != "conversation.batch" or message["seq_to"] <= sent:
                    continue
                if branch is not None and any(
                    e.get("branch", 0) != branch for e in message["events"]
                ):
                    continue  # another branch's run
                if checking is None and time.monotonic() - checked_at >= RECHECK_INTERVAL:
                    checking, checked_at = asyncio.ensure_future(still_valid()), time.monotonic()
                if message["seq_from"] > sent + 1:  # messages were dropped: fill from the log
                    frames, upto = await replay(sent)
                    for frame in frames:
                        yield frame
                    sent = max(sent, upto)
                for event in message["events"]:
                    if event["seq"] > sent:
                        yield _frame(event)
                        sent = event["seq"]
        finally:
            slot.release()
            for pending in (receiving, checking):
                if pending is not None:
                    pending.cancel()
            for group in groups:
                await layer.group_discard(group, channel)

    response = EventStream(stream(), slot, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass events through as they come
    return response
