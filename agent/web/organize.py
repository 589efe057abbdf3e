"""The conversation list's own controls and a conversation's instructions, from the page:
pin (pinned ones first), archive (archived ones only in the list's archived view), a
rename's answer to the page (in place, as pin and archive), and the
instructions the agent gets with this conversation's system prompt (docs/API.md has the
same through ``PATCH /api/conversations/<id>``). From the page's transport each answers the list's
fragment (or 204); without script, back to the page."""

from __future__ import annotations

import uuid

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from agent.access import OWN, READ, conversations_of, own_list, settings_level
from agent.ui.fragments import archived_fragment, title_fragment
from agent.web.reach import reach, refusal

INSTRUCTIONS_MAX = 4000  # a conversation's instructions, in characters: in every model call


def _list(request: HttpRequest, current, archived: bool) -> HttpResponse:
    context = {"conversations": own_list(request.user, archived), "archived_view": archived,
               "conversation": current}  # fmt: skip
    return render(request, "agent/_conv_list.html", context)


@login_required
@require_GET
def conversation_list(request: HttpRequest, conversation_id) -> HttpResponse:
    """The list, as the page at this conversation shows it (``?archived=1``, or
    ``?view=archived`` as the list's own field says it: the archived)."""
    current = reach(request, conversation_id, READ)
    archived = request.GET.get("archived") == "1" or request.GET.get("view") == "archived"
    return _list(request, current, archived)


def _set_flag(request: HttpRequest, conversation_id, field: str) -> HttpResponse:
    conversation = reach(request, conversation_id, OWN)
    value = request.POST.get(field) == "1"
    if getattr(conversation, field) != value:
        setattr(conversation, field, value)
        # Its place among the recent ones stays. (An archive leaves, or comes back to, its
        # readers' "Shared with me", and its open pages' headers follow: revocation.py.)
        conversation.save(update_fields=[field])
    current = _current(request, conversation)
    if request.headers.get("HX-Request"):
        response = _list(request, current, request.POST.get("view") == "archived")
        if field == "archived" and current.id == conversation.id:  # its header's mark too
            mark = archived_fragment(conversation.id, conversation.archived, "owner")
            response.content += mark.encode()
        return response
    return redirect("conversation", conversation_id=current.id)


def _current(request: HttpRequest, conversation):
    """The page a list control was used on (its list marks that one): one of the user's,
    else ``conversation``."""
    current = conversations_of(request.user).filter(id=_uuid(request.POST.get("current")))
    return current.first() or conversation


def renamed(request: HttpRequest, conversation) -> HttpResponse:
    """A rename's answer to the page's transport (from a list entry or the ⋯ menu), so the page (a
    half-typed prompt, the scroll) stays: the list as that page shows it, and the page's
    heading, out of band, when it is the renamed one's."""
    current = _current(request, conversation)
    response = _list(request, current, request.POST.get("view") == "archived")
    if current.id == conversation.id:
        response.content += title_fragment(conversation.display_title).encode()
    return response


def _uuid(value) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


@login_required
@require_POST
def set_pinned(request: HttpRequest, conversation_id) -> HttpResponse:
    return _set_flag(request, conversation_id, "pinned")


@login_required
@require_POST
def set_archived(request: HttpRequest, conversation_id) -> HttpResponse:
    return _set_flag(request, conversation_id, "archived")


@login_required
@require_POST
def set_instructions(request: HttpRequest, conversation_id) -> HttpResponse:
    """Saved for the next prompt on (its owner and collaborators); too long: 400, the text
    left where it was typed."""
    conversation = reach(request, conversation_id, settings_level(["instructions"]))
    text = request.POST.get("instructions", "")
    if len(text) > INSTRUCTIONS_MAX:
        return refusal(f"Instructions are limited to {INSTRUCTIONS_MAX} characters.", 400)
    conversation.instructions = text.strip()
    conversation.save(update_fields=["instructions"])  # (not activity: the list's order stays)
    if request.headers.get("HX-Request"):
        return HttpResponse(status=204)
    return redirect("conversation", conversation_id=conversation.id)
