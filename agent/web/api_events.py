"""The API's event stream of a conversation (``GET .../events``): SSE, one ``id:``/``data:``
frame per event (docs/API.md).

It replays stored events after ``Last-Event-ID`` / ``?since`` and then goes live, with no
gap and no duplicate; ``?branch=<id>`` reads one branch's path instead of following the
active one. What it sends is what ``ConversationFeed`` yields (agent/web/feed.py). An open
stream ends when its token is revoked or its user deactivated (a message through the
channel layer, agent/web/revocation.py) and when a re-check of the token fails: at every
heartbeat and at most once a second while events flow.
"""

from __future__ import annotations

import contextlib
import json
import weakref
from functools import partial
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from agent.access import READ
from agent.models import Conversation
from agent.runs.branches import listing as branch_listing
from agent.runs.manager import runs
from agent.server import metrics
from agent.server.user_connections import Slot, connections, refused_message
from agent.web.api_base import api_error, api_view, of_conversation
from agent.web.api_tokens import token_still_valid
from agent.web.feed import ChannelInbox, ConversationFeed, Ended
from agent.web.rechecks import Recheck
from agent.web.revocation import SIGNED_OUT, token_group, user_group


def _since(request: HttpRequest) -> int | None:
    raw = request.headers.get("Last-Event-ID") or request.GET.get("since") or "0"
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value >= 0 else None


def _frame(event: dict[str, Any]) -> str:
    return f"id: {event['seq']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"


@api_view("GET")
@of_conversation(READ)
async def events(request: HttpRequest, conversation: Conversation) -> HttpResponse:
    since = _since(request)
    if since is None:
        return api_error(400, "bad_request", "Last-Event-ID / since must be a whole number.")
    # ?branch=<id>: another branch's path, read as it is (docs/API.md); by default the
    # active one's, following switches.
    branch = request.GET.get("branch")
    if branch is not None:
        if not branch.isdigit():
            return api_error(400, "bad_request", "branch must be a branch id (a whole number).")
        branch = int(branch)
        known = await sync_to_async(branch_listing, thread_sensitive=False)(conversation)
        if branch not in {b["id"] for b in known}:
            return api_error(404, "not_found", "This conversation has no such branch.")
    user, token_id = request.api_user, request.api_token_id
    # One live connection more for the user (agent/server/user_connections.py), shared
    # with their page sockets; their open streams are not touched by a refusal.
    slot = connections.take(user.pk)
    if slot is None:
        metrics.CONNECTIONS_REFUSED.inc(label="event_stream")
        return api_error(429, "too_many_connections", refused_message())
    try:
        return await _event_stream(conversation, user, token_id, since, branch, slot)
    except BaseException:  # an error or a cancel before the response exists
        slot.release()
        raise


class EventStream(StreamingHttpResponse):
    """An event stream's response, holding its user's connection slot. The stream gives
    it back when it ends; Django's ``close()`` when the stream never started (the client
    left before the first byte); and, should the response be dropped unclosed, its
    finalizer. ``Slot.release`` counts once."""

    def __init__(self, content, slot: Slot, **kwargs):
        super().__init__(content, **kwargs)
        self.slot = slot
        weakref.finalize(self, slot.release)

    def close(self) -> None:
        self.slot.release()
        super().close()


async def _event_stream(conversation: Conversation, user, token_id: int, since: int,
                        branch: int | None, slot: Slot) -> HttpResponse:  # fmt: skip
    await runs.start_background()  # this process's cancel listener and run reaper
    # Token unrevoked, user active, conversation still theirs: one query, off the loop.
    still_valid = partial(token_still_valid, token_id, conversation.id)
    recheck = Recheck(still_valid, lambda valid: None if valid else SIGNED_OUT)
    # The user's group: deactivation; the token's: its revocation (agent/web/revocation.py).
    inbox = ChannelInbox(conversation.id, [user_group(user.pk), token_group(token_id)])
    feed = ConversationFeed(conversation.id, user, since=since, branch=branch, inbox=inbox,
                            recheck=recheck,
                            heartbeat=settings.HARNESS_SSE_HEARTBEAT)  # fmt: skip

    async def stream():
        try:
            # Daphne sends the response's headers with its first bytes: without this, a
            # client of a quiet conversation would wait a whole heartbeat to see the 200.
            yield ": connected\n\n"
            async with contextlib.aclosing(feed.items()) as items:
                async for item in items:
                    if item is None:
                        yield ": heartbeat\n\n"
                    elif not isinstance(item, Ended):
                        for event in item.wire():
                            yield _frame(event)
        finally:
            slot.release()

    response = EventStream(stream(), slot, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass events through as they come
    return response
