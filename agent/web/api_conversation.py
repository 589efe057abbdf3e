"""The API's views of one conversation: prompt, cancel, compact, approve, unqueue, its
settings, its branches and forks, its members (docs/API.md). Each goes through
``api_view`` and ``of_conversation`` (agent/web/api_base.py): the caller's role on the
conversation decides (agent/access.py).
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse

from agent.access import DRIVE, OWN, READ, allows, settings_level
from agent.core.config import APPROVAL_MODES, THINKING_LEVELS
from agent.models import Conversation
from agent.runs.branches import fork_copy
from agent.runs.branches import listing as branch_listing
from agent.runs.claim import RunRefused
from agent.runs.manager import runs
from agent.web.api_base import (
    REFUSAL_STATUS,
    api_error,
    api_view,
    conversation_detail,
    forbidden,
    json_body,
    of_conversation,
    one_of,
    throttled,
)
from agent.web.organize import INSTRUCTIONS_MAX
from agent.web.prompts import (
    accept_prompt,
    decide_approval,
    regenerate,
    remove_queued,
    start_compaction,
    switch_branch,
)
from agent.web.sharing import ShareRefused, remove_member, set_member, set_team
from agent.web.throttle import Throttled, check_new_conversation
from agent.web.views import TITLE_MAX, model_choices


@api_view("POST")
@of_conversation(DRIVE)
async def prompt(request: HttpRequest, conversation: Conversation) -> JsonResponse:
    body = json_body(request) or {}
    content, mode = body.get("content"), body.get("mode")
    try:
        queued = await accept_prompt(conversation.id, request.api_user, content, mode,
                                     edit_of=body.get("edit_of"), images=body.get("images"),
                                     restore_files=body.get("restore_files", True))  # fmt: skip
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
    """Answer a prompt again on a new branch: 202; 409 while one runs."""
    body = json_body(request)
    if body is None and request.body.strip():
        return api_error(400, "bad_request", 'The body must be JSON: {"of"?: <seq>}.')
    try:
        body = body or {}
        await regenerate(conversation.id, request.api_user, body.get("of"),
                         body.get("restore_files", True))  # fmt: skip
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
        body = json_body(request) or {}
        fork = await switch_branch(conversation.id, request.api_user, branch,
                                   body.get("restore_files", True))  # fmt: skip
    except RunRefused as refused:
        return api_error(REFUSAL_STATUS.get(refused.code, 400), refused.code, refused.message)
    return JsonResponse({"active": branch, "fork_seq": fork})


@api_view("POST")
@of_conversation(READ)
async def fork_view(request: HttpRequest, conversation: Conversation) -> JsonResponse:
    """A copy of the active branch up to ``at``, owned by the caller: any
    reader may fork, a viewer included; the copy is theirs, in their own workspace."""
    body = json_body(request)
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
    """Remove a queued prompt: 204, or 404 when it is not waiting (unknown,
    delivered already, or dropped with its run)."""
    running = conversation.state == Conversation.State.RUNNING
    if not await remove_queued(conversation.id, queue_id, running=running):
        return api_error(404, "not_found", "No such prompt in the queue (it may have been sent).")
    return HttpResponse(status=204)


@api_view("POST")
@of_conversation(DRIVE)
async def approval(request: HttpRequest, conversation: Conversation, call_id: str) -> JsonResponse:
    """Approve or deny a tool call waiting for a decision: 200; 404 when no
    such call waits; 409 when it was already decided. ``"approve_all": true`` also approves
    the run's later calls."""
    body = json_body(request)
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
@of_conversation(READ, PATCH=DRIVE)
async def conversation(request: HttpRequest, conversation: Conversation) -> JsonResponse:
    """One conversation's JSON; PATCH changes its title, model, thinking level, approval or
    instructions (from the next prompt on), pins or archives it, or opens it to the team:
    the owner all of it, a collaborator the instructions (``settings_level``). Nothing is
    changed unless every given value is valid."""
    if request.method == "GET":
        return JsonResponse(conversation_detail(conversation))
    body = json_body(request)
    if body is None:
        return api_error(400, "bad_request", "The body must be a JSON object.")
    if not allows(conversation.role, settings_level(body)):
        return forbidden()
    changes, problem = conversation_changes(body)
    if problem:
        return api_error(400, "bad_request", problem)
    team = changes.pop("team", None)
    # Only what changes is saved (a save of a listed field tells its readers' pages).
    changes = {k: v for k, v in changes.items() if getattr(conversation, k) != v}
    if changes:
        for name, value in changes.items():
            setattr(conversation, name, value)
        # No setting is activity: its place among the recently active stays as it was.
        await conversation.asave(update_fields=list(changes))
    if team is not None:  # closing it re-checks every reader's connections
        await sync_to_async(set_team)(conversation, team)
    return JsonResponse(conversation_detail(conversation))


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
        elif key in ("team", "pinned", "archived"):
            if not isinstance(value, bool):
                return {}, f"'{key}' must be true or false."
            changes[key] = value
        elif key == "instructions":
            if not isinstance(value, str) or len(value) > INSTRUCTIONS_MAX:
                limit = f"{INSTRUCTIONS_MAX} characters"
                return {}, f"'instructions' must be a string of at most {limit}."
            changes["instructions"] = value.strip()
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
    body = json_body(request)
    if body is None:
        return api_error(400, "bad_request", 'The body must be {"role": "viewer"} or similar.')
    try:
        found = await sync_to_async(set_member)(conversation, username, body.get("role"))
    except ShareRefused as refused:
        return api_error(400, refused.code, refused.message)
    return JsonResponse({"username": found.user.get_username(), "role": found.role})
