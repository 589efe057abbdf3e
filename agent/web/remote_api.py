"""The API's network half of projects (docs/API.md, "Projects", "Git credentials"): the
caller's git credentials, a project cloned from a URL, and a conversation's branch pushed.

Credentials are the caller's own (another user's: 404). A token is taken
once and never returned. The clone answers at once (201, ``cloning``) and goes on in the
background (agent/runs/git_remote.py); the project then reads ``ready`` or ``failed``
with git's message.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from agent.access import DRIVE
from agent.models import Project
from agent.runs import git_credentials, git_remote, projects
from agent.sandbox.git_spawn import BRANCH
from agent.web.api_base import api_error, api_view, json_body, of_conversation

NAME_MAX = 200


@api_view("GET", session=True)
def git_credentials_view(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"hosts": git_credentials.listed(request.api_user)})


@api_view("PUT", "DELETE", session=True)
def git_credential(request: HttpRequest, host: str) -> HttpResponse:
    try:
        if request.method == "DELETE":
            git_credentials.remove(request.api_user, host)
            return HttpResponse(status=204)
        body = json_body(request)
        if body is None:
            return api_error(400, "bad_request", "The body must be a JSON object.")
        git_credentials.store(request.api_user, host, body.get("username"), body.get("token"))
    except git_credentials.BadCredential as exc:
        return api_error(400, "bad_request", str(exc))
    return HttpResponse(status=204)


def create_cloned(request: HttpRequest, body: dict) -> JsonResponse:
    """``POST /api/projects`` with a ``git_url``: the project, its clone started."""
    name = body.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX:
        return api_error(400, "bad_request", f"'name' must be 1 to {NAME_MAX} characters.")
    problem = git_remote.url_problem(body.get("git_url"))
    if problem is not None:
        return api_error(400, "bad_url", problem)
    branch = body.get("branch")
    if branch is not None and (not isinstance(branch, str) or not BRANCH.match(branch)):
        return api_error(400, "bad_request", "'branch' must be a branch name.")
    try:
        project = projects.reserve(
            request.api_user, name=" ".join(name.split()), git_url=body["git_url"],
            default_branch=branch or "",
        )  # fmt: skip
    except projects.TooMany as exc:
        return api_error(429, "too_many_projects", str(exc))
    except projects.TooManyClones as exc:
        return api_error(429, "throttled", str(exc))
    git_remote.start_clone(project.id)
    return JsonResponse({"id": str(project.id), "state": project.state}, status=201)


@api_view("POST", session=True)
@of_conversation(DRIVE)
async def push(request: HttpRequest, conversation) -> JsonResponse:
    """The conversation's branch pushed to its project's remote, with the project owner's
    credential; owner and collaborators."""
    found = await Project.objects.filter(pk=conversation.project_id).afirst()
    if found is None or not conversation.branch:
        return api_error(409, "no_project", "This conversation does not work in a project.")
    try:
        pushed = await git_remote.push(found, conversation.branch, conversation.id)
    except git_remote.GitFailed as exc:
        if exc.rejected:
            return api_error(409, "push_rejected", exc.message)
        return api_error(502, "remote_error", exc.message)
    return JsonResponse({"remote": pushed.remote, "branch": pushed.branch,
                         "commit": pushed.commit})  # fmt: skip
