"""The owner's sharing of a conversation: members by username, the team.

One module for the API and the page's share dialog alike. A change of access (a member
added, removed or given another role, the team closed) tells every socket and event
stream of the conversation to re-check it at once, once the change is committed
(``access.recheck`` to its group, agent/web/revocation.py): a reader who lost access is
closed, a collaborator made viewer can no longer drive (that is checked on every frame),
and an open page whose reader's role changed re-draws itself for the new one.
The members' "Shared with me" follow a membership's every change wherever it is made (the
signals in agent/web/revocation.py); the team's, ``set_team``'s notice.
"""

from __future__ import annotations

from django.db import transaction

from agent import audit
from agent.models import Conversation, Membership, User
from agent.runs import terminals
from agent.runs.cli_sessions import end_session_sync
from agent.runs.manager import drop_author_from_sync
from agent.web.revocation import recheck_conversation, refresh_everyones_shared_lists

ROLES = tuple(Membership.Role.values)
USERNAME_MAX = 150


class ShareRefused(Exception):
    """A sharing request that changes nothing: ``code`` for programs, ``message`` for
    people (a 400)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def _member_user(conversation: Conversation, username) -> User:
    if not isinstance(username, str) or not 0 < len(username) <= USERNAME_MAX:
        raise ShareRefused("unknown_user", "No such user.")
    user = _named(User.objects.filter(is_active=True), "username", username)
    if user is None:
        raise ShareRefused("unknown_user", f"No active user is called {username[:60]!r}.")
    if user.pk == conversation.owner_id:
        raise ShareRefused("self_share", "You own this conversation already.")
    return user


def _named(rows, field: str, username: str):
    """The row whose ``field`` is ``username``, or else the one row it matches but for
    case ("Alice" for "alice"; none when two names differ only so): people type names as
    they say them."""
    found = rows.filter(**{field: username}).first()
    if found is None:
        matches = list(rows.filter(**{f"{field}__iexact": username})[:2])
        found = matches[0] if len(matches) == 1 else None
    return found


def set_member(conversation: Conversation, username, role) -> Membership:
    """Grant ``username`` ``role`` (added, or changed); ``ShareRefused`` on bad input."""
    if not isinstance(role, str) or role not in ROLES:
        raise ShareRefused("bad_role", f"'role' must be one of {', '.join(ROLES)}.")
    user = _member_user(conversation, username)
    with transaction.atomic():
        membership, created = Membership.objects.select_for_update().get_or_create(
            conversation=conversation, user=user, defaults={"role": role}
        )
        membership.user = user  # (already read: the caller may name it)
        changed = membership.role != role
        lowered = not created and changed and role == Membership.Role.VIEWER
        if created:
            audit.record(audit.Action.MEMBER_ADDED, target=_shared(conversation, user),
                         actor=conversation.owner, role=role)  # fmt: skip
        elif membership.role != role:
            audit.record(audit.Action.MEMBER_CHANGED, target=_shared(conversation, user),
                         actor=conversation.owner, before=membership.role, after=role)  # fmt: skip
            membership.role = role
            membership.save(update_fields=["role"])
        if created or changed:  # their open pages (a team reader's) re-draw for the role
            recheck_conversation(conversation.pk)  # (their "Shared with me": a signal's)
        if lowered:  # a collaborator made viewer: what they queued does not run
            _drop_queued(conversation, user.get_username())
    return membership


def remove_member(conversation: Conversation, username) -> bool:
    """Take the member out (their sockets and streams close); False when not a member."""
    if not isinstance(username, str) or len(username) > USERNAME_MAX:
        return False
    with transaction.atomic():
        members = Membership.objects.filter(conversation=conversation).select_related("user")
        membership = _named(members, "user__username", username)
        removed, _ = membership.delete() if membership else (0, None)
        if removed:
            username = membership.user.get_username()
            recheck_conversation(conversation.pk)
            _drop_queued(conversation, username)
            audit.record(audit.Action.MEMBER_REMOVED, target=_shared(conversation, username),
                         actor=conversation.owner)  # fmt: skip
    return bool(removed)


def _drop_queued(conversation: Conversation, username: str) -> None:
    """What a member who can no longer prompt had queued does not run, and a CLI agent's
    session and the Terminal panel's shell (whose processes they may have started) end:
    the next prompt starts the CLI anew, resuming the CLI's own session. Once committed."""

    def drop() -> None:
        drop_author_from_sync(conversation.pk, username)
        if conversation.agent != "harness":
            end_session_sync(conversation.pk)
        terminals.end_sync(conversation.pk)

    transaction.on_commit(drop)


def set_team(conversation: Conversation, team: bool) -> None:
    """Open the conversation to every active user (read-only), or close it again."""
    with transaction.atomic():
        Conversation.objects.filter(pk=conversation.pk).update(team=team)
        if conversation.team and not team:
            recheck_conversation(conversation.pk)
        if conversation.team != team:
            refresh_everyones_shared_lists()  # it is in (or out of) everyone's sidebar
            action = audit.Action.TEAM_OPENED if team else audit.Action.TEAM_CLOSED
            audit.record(action, target=_shared(conversation), actor=conversation.owner)
    conversation.team = team


def _shared(conversation: Conversation, user=None) -> str:
    """The audit log's target: the conversation (and the member)."""
    name = user if isinstance(user, str) or user is None else user.get_username()
    return f"conversation {conversation.pk}" + (f" with {name}" if name else "")
