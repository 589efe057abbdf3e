"""Who may reach which conversation, and how far: the one access helper.

Every view, socket frame, SSE stream, API endpoint, run claim and credential re-check
asks here, so the rule lives in one place. A conversation's readers:

- its owner (role ``owner``): everything;
- a member the owner made ``collaborator``: reads, and drives (prompt, queue, cancel,
  approve, compact, the conversation's instructions), in the owner's workspace and on the
  owner's budget;
- a member made ``viewer``, and with ``team`` on every active user: reads (the page, the
  socket, the events, live) and may fork a copy of their own.

Everyone else, and everyone while the owner's account is inactive, cannot reach it at all
(404, never 403). Whether an account is active is read from the database in the same
query: a long-lived connection's user object is stale.

Also here: who may hand out a credential that acts as another account (``may_act_as``: an
API token made in the admin, a proxy sign-in linked to an account).
"""

from __future__ import annotations

import uuid

from django.db.models import Case, Exists, OuterRef, Q, QuerySet, Value, When

from agent.models import Conversation, Membership, Project, User

# Roles, and the access levels an action needs (a role allows its level and those below).
OWNER, COLLABORATOR, VIEWER = "owner", "collaborator", "viewer"
READ, DRIVE, OWN = VIEWER, COLLABORATOR, OWNER
_RANK = {VIEWER: 1, COLLABORATOR: 2, OWNER: 3}


# A conversation's settings are its owner's; these its collaborators change too (they steer
# the agent as a prompt does, and a collaborator may prompt).
DRIVER_SETTINGS = frozenset({"instructions"})


def settings_level(fields) -> str:
    """The level changing these settings of a conversation needs (a PATCH's fields)."""
    return DRIVE if set(fields) <= DRIVER_SETTINGS else OWN


def allows(role: str | None, level: str) -> bool:
    """Whether ``role`` (None: cannot read) may do what needs ``level``."""
    return role is not None and _RANK[role] >= _RANK[level]


def owned_by(user_id) -> QuerySet[Conversation]:
    """The user's own conversations, whatever the account's state (a run's claim tells an
    inactive owner apart from a missing conversation)."""
    return Conversation.objects.filter(owner_id=user_id)


def _member(user_id, role: str | None = None):
    rows = Membership.objects.filter(conversation=OuterRef("pk"), user_id=user_id)
    return Exists(rows.filter(role=role) if role else rows)


def readable_by(user_id) -> QuerySet[Conversation]:
    """The conversations ``user_id`` may read now, each annotated with ``role``: their own,
    those shared with them, and the team's; the owner and the reader both active.

    What it reads is what ``rule_inputs`` returns: a new input of the rule goes there too
    (open sockets re-run this rule when one of its inputs changes)."""
    active = Exists(User.objects.filter(pk=user_id, is_active=True))
    return (
        Conversation.objects.filter(owner__is_active=True)
        .filter(active)
        .filter(Q(owner_id=user_id) | Q(team=True) | _member(user_id))
        .annotate(
            role=Case(
                When(owner_id=user_id, then=Value(OWNER)),
                When(_member(user_id, COLLABORATOR), then=Value(COLLABORATOR)),
                default=Value(VIEWER),
            )
        )  # fmt: skip
    )


def rule_inputs(pairs: set[tuple[int, uuid.UUID]]) -> dict[tuple[int, uuid.UUID], tuple]:
    """For (reader, conversation) pairs, everything ``readable_by`` reads about them: the
    reader's account state (None: no such user), the conversation's owner, team flag and
    owner's state (None: no such conversation), the reader's membership role. Three
    simple queries whatever the number of pairs; ``role_from`` decides on them, and the
    value changes whenever any of it does (a reader whose inputs did not change need not
    be decided again)."""
    users = {user for user, _ in pairs}
    conversations = {conversation for _, conversation in pairs}
    readers = dict(User.objects.filter(pk__in=users).values_list("pk", "is_active"))
    rows = Conversation.objects.filter(id__in=conversations)
    owners = {row[0]: row[1:] for row in rows.values_list("id", "owner_id", "team",
                                                           "owner__is_active")}  # fmt: skip
    members = Membership.objects.filter(conversation_id__in=conversations, user_id__in=users)
    roles = {(user, conversation): role
             for conversation, user, role in members.values_list("conversation_id", "user_id",
                                                                 "role")}  # fmt: skip
    return {
        (user, conversation): (
            readers.get(user),
            owners.get(conversation),
            roles.get((user, conversation)),
        )  # fmt: skip
        for user, conversation in pairs
    }


def role_from(user_id, inputs: tuple) -> str | None:
    """``readable_by``'s rule decided on one pair's ``rule_inputs`` rather than in SQL:
    the reader's role, None when they cannot read it. Deciding a single conversation this
    way costs three simple queries instead of compiling the rule's subqueries (the
    prompt's start pays it twice: tests/test_access_rule.py holds the two forms equal on
    every combination of inputs)."""
    reader_active, conversation, member_role = inputs
    if not reader_active or conversation is None:
        return None
    owner_id, team, owner_active = conversation
    if not owner_active:
        return None
    if owner_id == user_id:
        return OWNER
    if member_role == COLLABORATOR:
        return COLLABORATOR
    return VIEWER if member_role is not None or team else None


def _member_role(user_id, key: uuid.UUID) -> str | None:
    rows = Membership.objects.filter(conversation_id=key, user_id=user_id)
    return next(iter(rows.values_list("role", flat=True)[:1]), None)


def _active(user_id) -> bool | None:
    """The account's state (None: no such user)."""
    rows = User.objects.filter(pk=user_id).values_list("is_active", flat=True)
    return next(iter(rows[:1]), None)


def role_on(user_id, conversation_id, reader_active: bool | None = None) -> str | None:
    """``user_id``'s role on one conversation now (None: cannot read it), by ``role_from``
    on rows read by primary key: one query when the reader is the owner; for anyone else
    their membership and, unless the caller read it (``reader_active``), their account."""
    key = _key(conversation_id)
    if user_id is None or key is None:
        return None
    rows = Conversation.objects.filter(id=key)
    found = list(rows.values_list("owner_id", "team", "owner__is_active")[:1])
    if not found:
        return None
    conversation = found[0]
    if conversation[0] == user_id:
        return role_from(user_id, (conversation[2], conversation, None))
    if reader_active is None:
        reader_active = _active(user_id)
    return role_from(user_id, (reader_active, conversation, _member_role(user_id, key)))


def reachable_by(user_id, level: str = READ) -> QuerySet[Conversation]:
    """The conversations ``user_id`` may reach at ``level`` (READ, DRIVE or OWN)."""
    rows = readable_by(user_id)
    if level == OWN:
        return rows.filter(owner_id=user_id)
    if level == DRIVE:
        return rows.filter(Q(owner_id=user_id) | _member(user_id, COLLABORATOR))
    return rows


# The name the run layer and the credential checks have always used: what a user may read.
accessible_to = readable_by


def _key(conversation_id) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(conversation_id))
    except ValueError:
        return None


def with_owners(keys) -> QuerySet[Conversation]:
    """Conversations by primary key, each with its owner (what ``readable_one`` reads)."""
    return Conversation.objects.select_related("owner").filter(id__in=keys)


def readable_one(user_id, key: uuid.UUID, row: Conversation | None = None) -> Conversation | None:
    """The conversation with its ``role`` (``role_from`` on rows read by primary key: the
    owner reading their own costs one query, the owner joined; none with ``row``, the
    conversation read beforehand by ``with_owners``, in the caller's transaction)."""
    if row is None:
        # (a slice, not first(): no ORDER BY for a lookup by primary key)
        found = list(with_owners([key])[:1])
        if not found:
            return None
        row = found[0]
    conversation = row
    inputs = (conversation.owner_id, conversation.team, conversation.owner.is_active)
    if conversation.owner_id == user_id:
        reader_active, member_role = conversation.owner.is_active, None
    else:
        reader_active, member_role = _active(user_id), _member_role(user_id, key)
    conversation.role = role_from(user_id, (reader_active, inputs, member_role))
    return conversation if conversation.role is not None else None


def conversation_for(user, conversation_id) -> Conversation | None:
    """The conversation if ``user`` (signed in) may read it, with its ``role``; else None
    (shown as 404: a conversation one cannot read is not found, never forbidden). Whether
    the role allows an action is ``allows(conversation.role, level)``: 403 when not."""
    if not getattr(user, "is_authenticated", False):
        return None
    key = _key(conversation_id)
    if key is None:
        return None
    return readable_one(user.pk, key)


def inspectable(user, conversation_id) -> Conversation | None:
    """What the conversation's attached images may be shown to: a reader, or staff who may
    view every conversation in the admin (its transcript shows them too)."""
    conversation = conversation_for(user, conversation_id)
    if conversation is None and getattr(user, "is_staff", False):
        key = _key(conversation_id)
        if key is not None and user.has_perm("agent.view_conversation"):
            return Conversation.objects.filter(id=key).first()
    return conversation


def conversations_of(user) -> QuerySet[Conversation]:
    """The user's own conversation list, newest first."""
    return readable_by(user.pk).filter(owner_id=user.pk).order_by("-updated")


def own_list(user, archived: bool = False) -> QuerySet[Conversation]:
    """The sidebar's list of the user's own: pinned first, then the most recently updated;
    archived ones only when asked for (and then only they)."""
    listed = conversations_of(user).filter(archived=archived).select_related("project")
    return listed.order_by("-pinned", "-updated")


def shared_with(user) -> QuerySet[Conversation]:
    """Conversations others shared with the user (or with the team), newest first: the
    sidebar's "Shared with me"."""
    others = readable_by(user.pk).exclude(owner_id=user.pk)
    return others.select_related("owner").order_by("-updated")


def shared_list(user) -> list[Conversation]:
    """The sidebar's "Shared with me" as shown: archived ones left out, the newest 200."""
    return list(shared_with(user).filter(archived=False)[:200])


def listed_for(user) -> QuerySet[Conversation]:
    """Own and shared conversations, pinned ones first, then the newest, each with ``role``
    (the API's list)."""
    return readable_by(user.pk).order_by("-pinned", "-updated")


def members_of(conversation: Conversation) -> list[Membership]:
    return list(conversation.memberships.select_related("user").order_by("user__username"))


def empty_conversation_of(user) -> Conversation | None:
    """The user's newest conversation with nothing in it yet (no events, no title): "New
    conversation" goes back to it rather than piling up empty ones. Not one the user put
    away (archived: it is not in the list), gave instructions, or started in a project
    (its worktree): those are not blank, and "New conversation" must look new."""
    return (
        conversations_of(user)
        .filter(last_seq=0, title="", events__isnull=True)
        .filter(archived=False, instructions="", project__isnull=True)
        .exclude(state=Conversation.State.RUNNING)
        .first()
    )


def new_conversation(user: User, model: str, agent: str = "harness") -> Conversation:
    return Conversation.objects.create(owner=user, model=model, agent=agent)


# -- Acting as another account ----------------------------------------------------------
# A credential for another account (an API token, a proxy sign-in link) is everything that
# account may do: giving one needs the rights that acting as it implies, not only the
# right to add credentials.
CHANGE_USERS = "agent.change_user"


def may_act_as(actor, user: User) -> bool:
    """Whether ``actor`` may give a credential acting as ``user``: always for themself; for
    a superuser, only a superuser; for anyone else, one who may change users (and so could
    set their password anyway)."""
    if actor.pk == user.pk:
        return True
    if user.is_superuser:
        return actor.is_active and actor.is_superuser
    return actor.has_perm(CHANGE_USERS)


def actable_by(actor) -> QuerySet[User]:
    """The accounts ``actor`` may give such a credential for (``may_act_as``'s rule)."""
    if actor.is_active and actor.is_superuser:
        return User.objects.all()
    if actor.has_perm(CHANGE_USERS):
        return User.objects.filter(Q(is_superuser=False) | Q(pk=actor.pk))
    return User.objects.filter(pk=actor.pk)


# -- Projects ---------------------------------------------------------------------------
# A project is its owner's alone (docs/API.md, "Projects"): anyone else gets 404. What its
# conversations' members may do with the worktree follows the conversation's roles above.


def projects_of(user) -> QuerySet[Project]:
    return Project.objects.filter(owner_id=user.pk, owner__is_active=True)


def project_for(user, project_id) -> Project | None:
    key = _key(project_id)
    return None if key is None else projects_of(user).filter(pk=key).first()
