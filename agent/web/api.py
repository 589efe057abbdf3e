"""The HTTP + SSE API (docs/API.md), by job: the shared token and access checks
(agent/web/api_base.py), the views of one conversation (agent/web/api_conversation.py),
its event stream (agent/web/api_events.py), and here the views of the caller's whole
account: their conversations, the agents, their usage, search. Too many new conversations
from one user get 429 ``throttled`` (agent/web/throttle.py).
"""

from __future__ import annotations

from asgiref.sync import async_to_sync
from django.conf import settings
from django.http import HttpRequest, JsonResponse

from agent.access import listed_for, new_conversation
from agent.runs import search, usage
from agent.runs.cli_sessions import agents, check_available
from agent.web.api_base import (  # noqa: F401 - api_error, api_view: for other modules
    api_error,
    api_view,
    conversation_json,
    json_body,
    one_of,
    throttled,
)
from agent.web.api_conversation import (  # noqa: F401 - routed from here (harness_site/urls.py)
    activate_branch,
    approval,
    branches_view,
    cancel,
    compact,
    conversation,
    fork_view,
    member,
    members,
    prompt,
    regenerate_view,
    unqueue,
)
from agent.web.api_events import EventStream, events  # noqa: F401
from agent.web.api_projects import (  # noqa: F401 - routed from here (harness_site/urls.py)
    archive_view,
    changes_view,
    checkpoints_view,
    commit_view,
    project_view,
    projects_view,
    restore_view,
    start_in_project,
)
from agent.web.throttle import Throttled, check_new_conversation
from agent.web.views import TITLE_MAX, model_choices


@api_view("GET", "POST", session=True)
def conversations(request: HttpRequest) -> JsonResponse:
    if request.method == "GET":  # own and shared ones, each with the caller's role
        archived = request.GET.get("archived", "false")
        if archived not in ("true", "false"):
            return api_error(400, "bad_request", "'archived' must be true or false.")
        listed = listed_for(request.api_user).filter(archived=archived == "true")
        items = [conversation_json(c) for c in listed[:1000]]
        return JsonResponse({"conversations": items})
    body = json_body(request)
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
    project = body.get("project")
    if project is not None and not isinstance(project, str):
        return api_error(400, "bad_request", "'project' must be a project's id.")
    created = new_conversation(request.api_user, model, agent)
    if project is not None:
        refused = start_in_project(created, project, body.get("base"))
        if refused is not None:
            return refused
    if title.strip():
        created.title = " ".join(title.split())
        created.save(update_fields=["title"])
    return JsonResponse({"id": str(created.id)}, status=201)


@api_view("GET")
async def agents_view(request: HttpRequest) -> JsonResponse:
    """The external CLI agents and whether each can be used here."""
    return JsonResponse({"agents": await agents()})


@api_view("GET")
def usage_view(request: HttpRequest) -> JsonResponse:
    """The caller's spend this month, their budget and the last 31 days."""
    return JsonResponse(usage.report(request.api_user))


@api_view("GET")
def search_view(request: HttpRequest) -> JsonResponse:
    """Prompts and answers of the caller's conversations matching ``q``."""
    query = request.GET.get("q", "")
    if not query.strip() or len(query) > search.MAX_QUERY:
        return api_error(400, "bad_request", f"'q' must be 1 to {search.MAX_QUERY} characters.")
    return JsonResponse({"results": [f.plain() for f in search.search(request.api_user.pk, query)]})
