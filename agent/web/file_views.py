"""The pages' downloads and file views: a conversation's export, the Files panel of the
workspace its runs work in, a file of it as an attachment, and a prompt's attached image.
Bytes from a workspace are never served as something a browser would render on this
origin."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET

from agent.access import DRIVE, READ, inspectable
from agent.core.tools import PathError
from agent.runs import attachments
from agent.runs.workspaces import conversation_workspace, workspace_for
from agent.ui import browse
from agent.ui.bidi import bidi_visible
from agent.ui.export import conversation_json, conversation_markdown, conversation_meta
from agent.ui.highlight import HIGHLIGHT_CAP, highlighted
from agent.web.reach import reach, refusal

EXPORTS = {
    "md": ("text/markdown", conversation_markdown),
    "json": ("application/json", conversation_json),
}


@login_required
@require_GET
def export_conversation(request: HttpRequest, conversation_id, extension: str) -> HttpResponse:
    """A conversation one may read as a Markdown or JSON download (others' are 404)."""
    conversation = reach(request, conversation_id, READ)
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
    Loaded into a conversation's side panel by the page's transport (``/c/<id>/files/``,
    with download links), or shown as a page on its own (``/files/``)."""
    context: dict = {"error": None, "files_url": reverse("files"), "download_url": "",
                     "download_cap": browse.DOWNLOAD_CAP}  # fmt: skip
    if conversation_id is not None:  # the workspace its runs work in (the owner's, or
        conversation = reach(request, conversation_id, DRIVE)  # its project's worktree)
        context["files_url"] = reverse("conversation_files", args=[conversation.id])
        context["download_url"] = reverse("download_file", args=[conversation.id])
        workspace = conversation_workspace(conversation)
    else:
        workspace = workspace_for(request.user.pk)
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


@login_required
@require_GET
def download_file(request: HttpRequest, conversation_id) -> HttpResponse:
    """A file of the conversation's workspace (its owner's) as an attachment, from its Files
    panel (owner and collaborators).
    Read through the descriptor walk (no symlink out, no FIFO or device, at most
    ``browse.DOWNLOAD_CAP``) and never served as something a browser would render here: an
    octet stream, ``nosniff``, and a sandboxing CSP should it be opened anyway."""
    conversation = reach(request, conversation_id, DRIVE)
    workspace = conversation_workspace(conversation)  # the one its runs work in
    try:
        rel, data = browse.download(workspace, request.GET.get("path", ""))
    except browse.TooLarge as exc:
        return refusal(f"Not downloaded: {exc}.", 413)
    except PathError as exc:
        return refusal(f"Not downloaded: {exc}.", 404)
    return download_response(rel, data)


@login_required
@require_GET
def conversation_image(request: HttpRequest, conversation_id, sha256: str) -> HttpResponse:
    """An image attached to one of the conversation's prompts, for its
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
