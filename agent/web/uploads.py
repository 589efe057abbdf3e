"""Uploading from the page: drag and drop, paste, the file picker.

``PUT /files/upload/<name>`` with the file's raw bytes stores it as ``uploads/<name>`` in
the signed-in user's workspace; with ``?conversation=<id>``, in the workspace that
conversation's runs work in (its owner's), for one who may prompt there (the owner or a
collaborator; a viewer 403, anyone else 404, through the access helper). Through the
same confined, all-or-nothing write and the same limits as ``PUT /api/files/…`` (413
``too_large`` / ``quota_exceeded``). Signed in by the session cookie, so Django's CSRF
check applies (the page sends ``X-CSRFToken``); a name that is not one plain file name
(a slash, ``..``, NUL, a leading dot-dot) is 400 ``bad_path`` before anything is
touched, and the workspace's descriptor walk refuses a symlinked ``uploads`` directory
on its own.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_http_methods

from agent.access import DRIVE, allows, conversation_for
from agent.core.tools.workspace import PathError
from agent.runs.workspaces import workspace_for
from agent.web.api import api_error
from agent.web.files_api import store

UPLOAD_DIR = "uploads"
NAME_MAX = 200
FORBIDDEN = ("/", "\\", "\x00")


def checked_name(name: str) -> str | None:
    """The file name to store under ``uploads/``, or None when it is not one plain name."""
    name = name.strip()
    if not name or len(name) > NAME_MAX or name in (".", ".."):
        return None
    if any(c in name for c in FORBIDDEN) or any(ord(c) < 32 for c in name):
        return None
    return name


@require_http_methods(["PUT"])
def upload(request: HttpRequest, name: str) -> HttpResponse:
    if not request.user.is_authenticated:
        return api_error(401, "unauthorized", "Sign in to upload files.")
    plain = checked_name(name)
    if plain is None:
        message = "Name one file: no slashes, no '..', no control characters."
        return api_error(400, "bad_path", message)
    owner_id = request.user.pk
    if "conversation" in request.GET:
        conversation = conversation_for(request.user, request.GET["conversation"])
        if conversation is None:
            return api_error(404, "not_found", "No such conversation.")
        if not allows(conversation.role, DRIVE):
            return api_error(403, "forbidden", "Only those who may prompt here can upload.")
        owner_id = conversation.owner_id
    workspace = workspace_for(owner_id)
    try:
        return store(request, workspace, f"{UPLOAD_DIR}/{plain}")
    except PathError as exc:
        return api_error(400, "bad_path", str(exc))
