"""What the pages answer about access: a conversation reached at a level (404 for one
who cannot read it, 403 for a member whose role does not allow the action), and a
plain-text refusal."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse

from agent.access import allows, conversation_for
from agent.models import Conversation


def reach(request: HttpRequest, conversation_id, level: str) -> Conversation:
    """The conversation if the user's role allows ``level``; 404 when they cannot read it,
    403 when they can but their role does not allow this."""
    conversation = conversation_for(request.user, conversation_id)
    if conversation is None:
        raise Http404("No such conversation")
    if not allows(conversation.role, level):
        raise PermissionDenied("Your role on this conversation does not allow this.")
    return conversation


def refusal(message: str, status: int) -> HttpResponse:
    """A plain-text answer saying why not (a download, a share without script)."""
    response = HttpResponse(message + "\n", content_type="text/plain; charset=utf-8", status=status)
    response["X-Content-Type-Options"] = "nosniff"
    return response
