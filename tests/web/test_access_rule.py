"""The access rule's two forms (agent/access.py): ``readable_by`` in SQL, for lists, search
and the rest, and ``role_from`` on the rows ``rule_inputs`` reads, for one conversation at a
time (the socket's check of each frame, a prompt's claim, every view of one conversation).
They must agree on every combination of what the rule reads."""

from __future__ import annotations

import itertools
import uuid

import pytest

from agent.access import conversation_for, readable_by, role_from, role_on, rule_inputs
from agent.models import Conversation, Membership, User

pytestmark = pytest.mark.django_db

# reader active, owner active, reader is the owner, team, membership (None: none)
CASES = list(itertools.product((True, False), (True, False), (True, False), (True, False),
                               (None, "viewer", "collaborator")))  # fmt: skip


def test_both_forms_of_the_rule_agree_on_every_combination_of_its_inputs():
    decided = set()
    for number, (reader_on, owner_on, own, team, member) in enumerate(CASES):
        if own and member is not None:
            continue  # an owner is never a member of their own conversation
        owner = User.objects.create_user(f"owner{number}", is_active=owner_on)
        reader = owner if own else User.objects.create_user(f"reader{number}")
        if not own:
            User.objects.filter(pk=reader.pk).update(is_active=reader_on)
        elif not reader_on:
            continue  # (the owner's state is the reader's: case covered by owner_on)
        conversation = Conversation.objects.create(owner=owner, model="m", team=team)
        if member:
            Membership.objects.create(conversation=conversation, user=reader, role=member)
        in_sql = readable_by(reader.pk).filter(id=conversation.id).values_list("role", flat=True)
        expected = next(iter(in_sql), None)
        pair = (reader.pk, conversation.id)
        assert role_from(reader.pk, rule_inputs({pair})[pair]) == expected, CASES[number]
        assert role_on(reader.pk, conversation.id) == expected, CASES[number]
        reader.refresh_from_db()
        found = conversation_for(reader, conversation.id)
        assert (found.role if found else None) == expected, CASES[number]
        decided.add(expected)
    assert decided == {None, "viewer", "collaborator", "owner"}


def test_what_is_not_there_is_not_readable():
    user = User.objects.create_user("ada")
    assert role_on(user.pk, uuid.uuid4()) is None
    assert role_on(None, uuid.uuid4()) is None
    assert role_on(user.pk, "not-a-uuid") is None
    conversation = Conversation.objects.create(owner=user, model="m")
    assert role_on(user.pk + 1000, conversation.id) is None
