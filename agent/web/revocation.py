"""Ending open sockets and event streams, and stopping runs, when access is withdrawn.

Every open connection belongs to groups on the channel layer: a WebSocket to its user's and
its session's, an API event stream to its user's and its token's. Withdrawing access sends
a message to the group, so it reaches every server process (Redis, with ``REDIS_URL``):

- deactivating or deleting a user (admin, shell: ``post_save`` / ``post_delete``) ends all
  their sockets and streams and cancels their running prompts;
- signing out ends the sockets of that session;
- deleting a conversation (the page, the admin, a deleted user's cascade) ends its sockets
  at once, with the code that tells the page it is gone;
- the owner taking access away (a member removed or made viewer, the team closed:
  agent/web/sharing.py), or the owner's deactivation, makes every socket and stream of the
  conversation re-check its access at once (``access.recheck``): those who lost it close;
- changing a password makes each of the user's sockets check its session against the new
  password hash (``session.recheck``): the sessions signed in with the old password end;
- revoking an API token (``agent.web.api_tokens.revoke_tokens``, which the admin uses; or saving
  or deleting the token) ends the streams opened with it.

The same groups carry what is not a withdrawal but changes what a page shows: "Shared with
me" redrawn (``shared.changed``) when a membership, a conversation's archived flag, title or
team, or its owner's account changes by a save (the pages, the API, the admin, and a shell
when the layer is Redis's: the signals at the end), and an archive or unarchive redrawing the
conversation's open pages' mark (``conversation.archived``); and the owner's own list
fetched again on each of their pages (``own_list.changed``) when one of their conversations
is made, renamed, pinned, archived or deleted. The name a first prompt gives a
conversation (the run's claim writes it with an ``update()``) by the claim's own signal.

A message can be lost (a layer outage, a bulk ``update()`` that sends no signal), so every
connection also re-checks its credential in the database: a socket on each frame it
receives (``socket_access``), a stream at each heartbeat
(``agent.web.api_tokens.token_still_valid``), and both within about a second of a change to
what their credential is made of while they send (agent/web/rechecks.py).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from importlib import import_module

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from agent.runs.signals import conversation_named

log = logging.getLogger(__name__)

# Why a socket was refused (socket_access).
NOT_FOUND = "not_found"
SIGNED_OUT = "signed_out"

# Session engines whose sessions are rows of django_session (checked in the same query).
DB_SESSION_ENGINES = (
    "django.contrib.sessions.backends.db",
    "django.contrib.sessions.backends.cached_db",
)


# Every page's socket, of every user: for what changes everyone's sidebar (a conversation
# opened to the team, or closed again).
EVERYONE_GROUP = "users.all"


def user_group(user_id) -> str:
    return f"user.{int(user_id)}"


def session_group(session_key: str) -> str:
    return f"session.{hashlib.sha256(session_key.encode()).hexdigest()[:40]}"


def token_group(token_id) -> str:
    return f"token.{int(token_id)}"


def _send(group: str, kind: str = "user.revoked", **fields) -> None:
    try:
        async_to_sync(get_channel_layer().group_send)(group, {"type": kind, **fields})
    except Exception:  # a layer outage must not break an admin's save; frames re-check
        log.exception("could not notify %s", group)


def recheck_conversation(conversation_id) -> None:
    """Every socket and stream of the conversation re-checks its access, once the caller's
    transaction commits (before it, a check would still see the old access)."""
    from agent.runs.groups import group_name

    group = group_name(conversation_id)
    transaction.on_commit(lambda: _send(group, "access.recheck"))


def refresh_shared_lists(user_ids) -> None:
    """The pages of these users redraw their "Shared with me" (a conversation was shared
    with them, taken back, archived…), once the caller's transaction commits."""
    groups = [user_group(user_id) for user_id in user_ids]
    _refresh_on_commit(groups)


def refresh_everyones_shared_lists() -> None:
    """Every open page redraws its "Shared with me" (a conversation opened to the team, or
    closed again), once the caller's transaction commits."""
    _refresh_on_commit([EVERYONE_GROUP])


def _refresh_on_commit(groups: list[str]) -> None:
    transaction.on_commit(lambda: [_send(group, "shared.changed") for group in groups])


def _refresh_readers(team: bool, memberships) -> None:
    """The "Shared with me" of everyone when ``team`` (one of the conversations is the
    team's), else of the users of ``memberships``."""
    if team:
        refresh_everyones_shared_lists()
    else:
        refresh_shared_lists(memberships.values_list("user_id", flat=True).distinct())


def refresh_readers_lists(conversation) -> None:
    """The "Shared with me" of those the conversation is shared with."""
    from agent.models import Membership

    _refresh_readers(conversation.team, Membership.objects.filter(conversation_id=conversation.pk))


def _refresh_owners_readers(owner_id) -> None:
    """The "Shared with me" of everyone reading what this user shares (their account
    deactivated or back: it leaves, or comes back to, those lists)."""
    from agent.models import Conversation, Membership

    team = Conversation.objects.filter(owner_id=owner_id, team=True).exists()
    _refresh_readers(team, Membership.objects.filter(conversation__owner_id=owner_id))


def refresh_own_lists(owner_id) -> None:
    """The owner's open pages fetch their own conversation list again (one of theirs was
    made, renamed, pinned, archived or deleted elsewhere), once the caller's transaction
    commits."""
    group = user_group(owner_id)
    transaction.on_commit(lambda: _send(group, "own_list.changed"))


def _tell_pages(conversation, kind: str, **fields) -> None:
    """Every open page of the conversation gets ``kind`` (its consumer draws it), once the
    caller's transaction commits: ``conversation.archived`` shows or hides the "Archived"
    mark (and the owner's ⋯ menu entry), ``conversation.renamed`` the heading (which the
    tab's title and the list's entry follow)."""
    from agent.runs.groups import group_name

    group = group_name(conversation.pk)
    transaction.on_commit(lambda: _send(group, kind, **fields))


def revoke_user(user) -> None:
    from django.db.models import Q

    from agent.access import owned_by
    from agent.models import Conversation
    from agent.runs.manager import cancel_from_sync

    _send(user_group(user.pk))
    running = owned_by(user.pk).filter(state=Conversation.State.RUNNING)
    for conversation_id in running.values_list("id", flat=True):
        cancel_from_sync(conversation_id)
    # The readers of what they shared lose it with them.
    shared = owned_by(user.pk).filter(Q(team=True) | Q(memberships__isnull=False)).distinct()
    for conversation_id in shared.values_list("id", flat=True):
        recheck_conversation(conversation_id)


def notify_token_revoked(token_id) -> None:
    """Ends the event streams opened with this token, on every process."""
    _send(token_group(token_id), "token.revoked")


# Each receiver names its model (lazily, by label): one without a sender would run on every
# model's saves and deletes, and its mere presence makes Django load every row a delete
# cascades to (a conversation's events) instead of deleting them in one query.
@receiver(post_save, sender=settings.AUTH_USER_MODEL, dispatch_uid="harness-revoke-inactive-user")
def _on_user_saved(sender, instance, created, update_fields=None, **kwargs) -> None:
    if created:
        return
    if not instance.is_active:
        revoke_user(instance)
    # set_password() keeps the new raw password in _password until save() is done (that is
    # how Django knows to run its password_changed hooks): this save changed the password.
    elif getattr(instance, "_password", None) is not None or (
        update_fields is not None and "password" in update_fields
    ):
        _send(user_group(instance.pk), "session.recheck")
    if update_fields is None or "is_active" in update_fields:  # (the admin saves it whole)
        _refresh_owners_readers(instance.pk)


@receiver(post_delete, sender=settings.AUTH_USER_MODEL, dispatch_uid="harness-revoke-deleted-user")
def _on_user_deleted(sender, instance, **kwargs) -> None:
    _send(user_group(instance.pk))


@receiver(post_delete, sender="agent.Conversation",
          dispatch_uid="harness-close-deleted-conversation")  # fmt: skip
def _on_conversation_deleted(sender, instance, **kwargs) -> None:
    from agent.runs.groups import group_name

    # Once it is committed: a socket's check must not still see it.
    group = group_name(instance.pk)
    transaction.on_commit(lambda: _send(group, "conversation.deleted"))
    refresh_own_lists(instance.owner_id)
    if instance.team:  # (its members': their memberships' deletion, below)
        refresh_everyones_shared_lists()


# "Shared with me" follows its rows wherever a save or delete changes them: the pages and
# the API, the admin (its forms, inline or not, and bulk deletes), a shell. A membership
# made, changed or deleted (a conversation's or a user's deletion deletes theirs); a
# conversation archived or not, renamed, or opened to the team, by a save that names the
# field or saves it whole (``set_team``'s update() sends no signal: it calls the notifier
# itself).
LISTED = frozenset({"archived", "title", "team"})
OWN_LISTED = frozenset({"archived", "title", "pinned"})  # what the owner's own list shows


@receiver(post_save, sender="agent.Membership", dispatch_uid="harness-shared-membership-saved")
@receiver(post_delete, sender="agent.Membership",
          dispatch_uid="harness-shared-membership-deleted")  # fmt: skip
def _on_membership_changed(sender, instance, **kwargs) -> None:
    refresh_shared_lists([instance.user_id])


@receiver(post_save, sender="agent.Conversation", dispatch_uid="harness-shared-conversation-saved")
def _on_conversation_saved(sender, instance, created, update_fields=None, **kwargs) -> None:
    if created or update_fields is None or OWN_LISTED.intersection(update_fields):
        refresh_own_lists(instance.owner_id)
    if created:
        return
    saved = LISTED if update_fields is None else LISTED.intersection(update_fields)
    if "team" in saved:  # opened to everyone, or closed again: everyone's list, either way
        refresh_everyones_shared_lists()
    elif saved:
        refresh_readers_lists(instance)
    if "archived" in saved:
        _tell_pages(instance, "conversation.archived", archived=bool(instance.archived))
    if "title" in saved:
        _tell_pages(instance, "conversation.renamed", title=instance.display_title)


@receiver(conversation_named, dispatch_uid="harness-lists-conversation-named")
def _on_conversation_named(sender, conversation, **kwargs) -> None:
    refresh_own_lists(conversation.owner_id)
    refresh_readers_lists(conversation)


@receiver(post_save, sender="agent.ApiToken", dispatch_uid="harness-revoke-token-saved")
def _on_token_saved(sender, instance, created, **kwargs) -> None:
    # The admin's change form, or token.revoked = now; token.save() in a shell.
    if instance.revoked is not None:
        notify_token_revoked(instance.pk)


@receiver(post_delete, sender="agent.ApiToken", dispatch_uid="harness-revoke-token-deleted")
def _on_token_deleted(sender, instance, **kwargs) -> None:
    notify_token_revoked(instance.pk)


@receiver(user_logged_out, dispatch_uid="harness-revoke-session")
def _on_logged_out(sender, request, user, **kwargs) -> None:
    key = getattr(getattr(request, "session", None), "session_key", None)
    if key:
        _send(session_group(key))


def _hash_matches(session_hash: str | None, user) -> bool:
    """Django's own test (``django.contrib.auth.get_user``): the session's hash against
    the user's current password hash, or one made with a SECRET_KEY_FALLBACKS key."""
    if not session_hash:
        return False
    if constant_time_compare(session_hash, user.get_session_auth_hash()):
        return True
    return any(
        constant_time_compare(session_hash, fallback)
        for fallback in user.get_session_auth_fallback_hash()
    )


def socket_access(
    conversation_id, user_id: int, session_key: str | None, session_hash: str | None
) -> tuple[str | None, str | None, str | None]:
    """Whether a browser socket may go on, and the user's role on the conversation now
    (access.py's roles): (None, the session's hash, the role) if so, else (NOT_FOUND or
    SIGNED_OUT, None, None). Blocking (call it from a thread).

    Read by primary key (two to four simple queries, agent/access.py's ``role_on``; a
    prompt frame pays this check, so it is kept cheap): the user active, the conversation
    still readable by them (their own, shared with them, or the team's; its owner active)
    and their role, the session still there and unexpired, and the user's password hash,
    which the session's hash (read when the socket opened) must still match: a password
    changed since ends the sessions signed in with the old one. Only when it does not
    match is the session read again (one more query), in case it was re-signed with the
    new hash since (Django's update_session_auth_hash, after a user changes their own
    password)."""
    from django.contrib.sessions.models import Session

    from agent.access import role_on
    from agent.models import User

    try:
        key = uuid.UUID(str(conversation_id))
    except ValueError:
        return NOT_FOUND, None, None
    account = list(User.objects.filter(pk=user_id).values_list("password", "is_active")[:1])
    if not account:
        return NOT_FOUND, None, None
    password, active = account[0]
    role = role_on(user_id, key, reader_active=active)
    if role is None:
        return NOT_FOUND, None, None
    if not session_key:
        return SIGNED_OUT, None, None
    if settings.SESSION_ENGINE in DB_SESSION_ENGINES:
        alive = Session.objects.filter(session_key=session_key, expire_date__gt=timezone.now())
        if not alive.exists():
            return SIGNED_OUT, None, None
    user = User(pk=user_id, password=password)
    if _hash_matches(session_hash, user):
        return None, session_hash, role
    fresh = import_module(settings.SESSION_ENGINE).SessionStore(session_key).get(HASH_SESSION_KEY)
    if _hash_matches(fresh, user):
        return None, fresh, role
    return SIGNED_OUT, None, None
