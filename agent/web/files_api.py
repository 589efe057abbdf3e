"""The caller's workspace over the API: ``GET /api/files/<path>`` lists a
directory or downloads a file, ``PUT`` uploads the raw body, ``DELETE`` removes.

Every path goes through the same confinement as the agent's tools (the workspace walked
from its root's descriptor, in a file worker, as the workspace's owner): a path that
leaves the workspace is 400 ``bad_path``, never a host file. Downloads are attachments,
never rendered on this origin. A body over ``HARNESS_MAX_UPLOAD_MB`` is refused before it
is read (``agent/server/body_limit.py``); a full workspace answers 413 ``quota_exceeded``.
"""

from __future__ import annotations

import errno

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from agent.core.tools.fileio import workers
from agent.core.tools.workspace import PathError, os_error_message
from agent.runs.workspaces import workspace_for
from agent.ui import browse
from agent.web.api import api_error, api_view
from agent.web.file_views import download_response

FULL = (errno.ENOSPC, errno.EDQUOT)
FULL_MESSAGES = {os_error_message(OSError(code, "")) for code in FULL}
NOT_FOUND = ("file not found", "not a directory")


@api_view("GET", "PUT", "DELETE")
def files(request: HttpRequest, path: str = "") -> HttpResponse:
    workspace = workspace_for(request.api_user.pk)
    try:
        if request.method == "PUT":
            return _upload(request, workspace, path)
        if request.method == "DELETE":
            workers.call(workspace, workspace.remove, path)
            return HttpResponse(status=204)
        rel, shown, _ = browse.browse(workspace, path)
        if isinstance(shown, list):
            entries = [{"name": e.name, "type": e.kind, "size": e.size} for e in shown]
            return JsonResponse({"path": rel, "entries": entries})
        return download_response(*browse.download(workspace, path))
    except browse.TooLarge as exc:
        return api_error(413, "too_large", str(exc))
    except PathError as exc:
        if str(exc) in NOT_FOUND:
            return api_error(404, "not_found", str(exc))
        return api_error(400, "bad_path", str(exc))


def _upload(request: HttpRequest, workspace, path: str) -> HttpResponse:
    if not path or path.endswith("/"):
        return api_error(400, "bad_path", "name the file to write")
    return store(request, workspace, path)


def store(request: HttpRequest, workspace, path: str) -> HttpResponse:
    """Write the request's raw body to ``path`` in the workspace, whole or not at all (the
    workspace writes a temporary file and renames it), within the upload and quota limits.
    The API's ``PUT`` and the page's upload (``agent/web/uploads.py``) alike."""
    limit = settings.HARNESS_MAX_UPLOAD_MB * 1024 * 1024
    data = request.read(limit + 1)  # (the body limit has already refused a larger one)
    if len(data) > limit:
        return api_error(
            413, "too_large", f"uploads are limited to {settings.HARNESS_MAX_UPLOAD_MB} MB"
        )
    try:
        rel, created = workers.call(workspace, workspace.write, path, data)
    except PathError as exc:
        if str(exc) in FULL_MESSAGES:
            return api_error(413, "quota_exceeded", str(exc))
        raise
    except OSError as exc:
        if exc.errno in FULL:
            return api_error(413, "quota_exceeded", "the workspace is full")
        raise
    return JsonResponse({"path": rel, "size": len(data)}, status=201 if created else 200)
