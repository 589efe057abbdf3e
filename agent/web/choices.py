"""A conversation's settings from the page's selects: its model, thinking and tool approval
(the owner's)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from agent.access import OWN
from agent.core.config import APPROVAL_MODES, THINKING_LEVELS
from agent.web.reach import reach
from agent.web.views import model_choices


def _set_choice(request: HttpRequest, conversation_id, field: str, choices) -> HttpResponse:
    """A conversation's setting from the page's select (``data-autosubmit``: 204 or 400, the
    page stays where it is) or, without script, its form (back to the conversation)."""
    conversation = reach(request, conversation_id, OWN)
    value = request.POST.get(field, "")
    known = value in choices
    if known:
        setattr(conversation, field, value)
        conversation.save(update_fields=[field])  # (not activity: the list's order stays)
    if request.headers.get("HX-Request"):
        return HttpResponse(status=204 if known else 400)
    return redirect("conversation", conversation_id=conversation.id)


@login_required
@require_POST
def set_model(request: HttpRequest, conversation_id) -> HttpResponse:
    return _set_choice(request, conversation_id, "model", dict(model_choices()))


@login_required
@require_POST
def set_thinking(request: HttpRequest, conversation_id) -> HttpResponse:
    return _set_choice(request, conversation_id, "thinking", THINKING_LEVELS)


@login_required
@require_POST
def set_approval(request: HttpRequest, conversation_id) -> HttpResponse:
    return _set_choice(request, conversation_id, "approval", APPROVAL_MODES)
