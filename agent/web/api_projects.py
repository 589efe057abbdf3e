"""The API's projects (docs/API.md, "Projects"): a user's repositories, and what a project
conversation's worktree offers: its checkpoints, a rewind, its changes, a commit, an
archive. A project is its owner's alone (anyone else: 404); a conversation's endpoints
follow its roles (agent/access.py): reading for checkpoints and changes (a viewer of
the page sees the diff), driving for the rest (as the Files panel). The signed-in page
calls them with its session (and CSRF token) as well as a client with a token. The git
work runs in the owner's sandbox (agent/runs/projects.py)."""

from __future__ import annotations

import asyncio
import re

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse

from agent.access import DRIVE, READ, project_for, projects_of
from agent.core.archive_formats import ArchiveError
from agent.core.git import GitError
from agent.core.projects.checkpoints import NothingToCommit, UnknownCheckpoint
from agent.core.tools.workspace import PathError
from agent.models import Conversation, Project
from agent.runs import git_remote, projects, rewind
from agent.runs.claim import RunRefused
from agent.runs.manager import runs
from agent.web import remote_api
from agent.web.api_base import REFUSAL_STATUS, api_error, api_view, json_body, of_conversation

NAME_MAX = 200
MESSAGE_MAX = 65536
COMMIT = re.compile(r"^[0-9a-f]{40}$")


def project_json(project: Project) -> dict:
    data = {"id": str(project.id), "name": project.name, "git_url": project.git_url,
            "default_branch": project.default_branch, "state": project.state}  # fmt: skip
    if project.state == Project.State.FAILED:
        data["error"] = project.error
    return data


def git_failed(exc: GitError) -> JsonResponse:
    return api_error(500, "git_error", f"git failed: {str(exc)[:2000]}")


@api_view("GET", "POST", session=True)
def projects_view(request: HttpRequest) -> JsonResponse:
    user = request.api_user
    git_remote.settle_interrupted(user)
    if request.method == "GET":
        return JsonResponse({"projects": [project_json(p) for p in projects_of(user)[:1000]]})
    if request.content_type == "multipart/form-data":
        return from_archive(request)
    body = json_body(request)
    if body is None:
        return api_error(400, "bad_request", "The body must be a JSON object.")
    name = body.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX:
        return api_error(400, "bad_request", f"'name' must be a string of 1 to {NAME_MAX}.")
    if body.get("git_url") is not None:
        return remote_api.create_cloned(request, body)
    try:
        project = projects.create_empty(user, " ".join(name.split()))
    except projects.TooMany as exc:
        return api_error(429, "too_many_projects", str(exc))
    except GitError as exc:
        return git_failed(exc)
    return JsonResponse({"id": str(project.id), "state": project.state}, status=201)


def from_archive(request: HttpRequest) -> JsonResponse:
    """``POST /api/projects`` as a form with ``name`` and an ``archive`` (.zip, .tar.gz)."""
    name, archive = request.POST.get("name"), request.FILES.get("archive")
    if not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX:
        return api_error(400, "bad_request", f"'name' must be a string of 1 to {NAME_MAX}.")
    if archive is None:
        return api_error(400, "bad_request", "'archive' must be a .zip or .tar.gz file.")
    archive.seek(0)
    try:
        project = projects.create_from_archive(request.api_user, " ".join(name.split()),
                                               archive, archive.size)  # fmt: skip
    except ArchiveError as exc:
        return api_error(400, "bad_archive", f"The archive was refused: {exc}"[:2000])
    except projects.TooMany as exc:
        return api_error(429, "too_many_projects", str(exc))
    except PathError as exc:
        return api_error(400, "bad_archive", f"The archive could not be unpacked: {exc}")
    except GitError as exc:
        return git_failed(exc)
    return JsonResponse({"id": str(project.id), "state": project.state}, status=201)


@api_view("GET", "DELETE", session=True)
def project_view(request: HttpRequest, project_id) -> HttpResponse:
    git_remote.settle_interrupted(request.api_user)
    project = project_for(request.api_user, project_id)
    if project is None:
        return api_error(404, "not_found", "No such project.")
    if request.method == "GET":
        return JsonResponse(project_json(project))
    if project.conversations.filter(state=Conversation.State.RUNNING).exists():
        return api_error(409, "prompt_running", "A prompt runs in one of its conversations.")
    try:
        projects.delete(project)
    except GitError as exc:
        return git_failed(exc)
    return HttpResponse(status=204)


def in_project(conversation: Conversation) -> JsonResponse | None:
    if projects.in_project(conversation):
        return None
    return api_error(400, "not_in_project", "This conversation does not work in a project.")


@api_view("GET", session=True)
@of_conversation(READ)
async def checkpoints_view(request: HttpRequest, conversation: Conversation) -> JsonResponse:
    listed = await sync_to_async(rewind.listing, thread_sensitive=False)(conversation)
    return JsonResponse({"checkpoints": listed})


@api_view("POST", session=True)
@of_conversation(DRIVE)
async def restore_view(request: HttpRequest, conversation: Conversation) -> JsonResponse:
    refused = in_project(conversation)
    if refused:
        return refused
    target = (json_body(request) or {}).get("checkpoint")
    if not isinstance(target, str) or not COMMIT.match(target):
        return api_error(400, "bad_request", "'checkpoint' must be a checkpoint's id.")
    try:
        await runs.settled(conversation.id)  # a run that has answered lets it go
        made = await rewind.restore(conversation.id, target)
    except RunRefused as refused:
        return api_error(REFUSAL_STATUS.get(refused.code, 400), refused.code, refused.message)
    except UnknownCheckpoint:
        return api_error(404, "not_found", "No such checkpoint in this conversation.")
    except GitError as exc:
        return git_failed(exc)
    return JsonResponse({"restored": target, "checkpoints": made})


@api_view("GET", session=True)
@of_conversation(READ)
async def changes_view(request: HttpRequest, conversation: Conversation) -> JsonResponse:
    refused = in_project(conversation)
    if refused:
        return refused
    try:
        found = await asyncio.to_thread(projects.changes, conversation)
    except GitError as exc:
        return git_failed(exc)
    return JsonResponse(found)


@api_view("POST", session=True)
@of_conversation(DRIVE)
async def commit_view(request: HttpRequest, conversation: Conversation) -> JsonResponse:
    refused = in_project(conversation)
    if refused:
        return refused
    message = (json_body(request) or {}).get("message")
    if not isinstance(message, str) or not message.strip() or len(message) > MESSAGE_MAX:
        return api_error(400, "bad_request", f"'message' must be a string of 1 to {MESSAGE_MAX}.")
    if "\0" in message:
        return api_error(400, "bad_request", "'message' must not hold a NUL character.")
    try:
        made = await asyncio.to_thread(projects.commit, conversation, message, request.api_user)
    except NothingToCommit as exc:
        return api_error(409, "nothing_to_commit", str(exc))
    except GitError as exc:
        return git_failed(exc)
    return JsonResponse({"commit": made}, status=201)


@api_view("GET", session=True)
@of_conversation(DRIVE)
async def archive_view(request: HttpRequest, conversation: Conversation) -> HttpResponse:
    refused = in_project(conversation)
    if refused:
        return refused
    try:
        data = await asyncio.to_thread(projects.archive, conversation)
    except GitError as exc:
        return git_failed(exc)
    response = HttpResponse(data, content_type="application/gzip")
    name = conversation.branch.replace("/", "-")
    response["Content-Disposition"] = f'attachment; filename="{name}.tar.gz"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


def start_in_project(conversation: Conversation, project_id, base) -> JsonResponse | None:
    """A new conversation's worktree (``POST /api/conversations`` with ``project``); an
    error answer when it cannot be made (the conversation is then deleted)."""
    project = project_for(conversation.owner, project_id)
    problem = None
    if project is None:
        problem = api_error(404, "not_found", "No such project.")
    elif project.state != Project.State.READY:
        problem = api_error(409, "project_not_ready", f"The project is {project.state}.")
    elif base is not None and not isinstance(base, str):
        problem = api_error(400, "bad_request", "'base' must be a branch or a commit.")
    if problem is None:
        conversation.project = project
        conversation.save(update_fields=["project"])
        try:
            projects.add_worktree(conversation, base or project.default_branch)
        except GitError as exc:
            problem = api_error(400, "bad_base", str(exc)[:2000])
    if problem is not None:
        conversation.delete()
    return problem
