"""The share dialog and the API find a member by the name typed, whatever its case, unless
two accounts' names differ only by case: then only the exact name does."""

from __future__ import annotations

import pytest

from agent.models import Conversation, Membership, User
from agent.web.sharing import ShareRefused, remove_member, set_member

pytestmark = pytest.mark.django_db


@pytest.fixture
def conversation():
    owner = User.objects.create_user("olga")
    return Conversation.objects.create(owner=owner, model="demo")


def members(conversation) -> dict[str, str]:
    rows = Membership.objects.filter(conversation=conversation)
    return dict(rows.values_list("user__username", "role"))


def test_a_name_typed_in_another_case_finds_the_one_account(conversation):
    User.objects.create_user("alice")
    set_member(conversation, "Alice", "viewer")
    assert members(conversation) == {"alice": "viewer"}
    set_member(conversation, "ALICE", "collaborator")
    assert members(conversation) == {"alice": "collaborator"}
    assert remove_member(conversation, "aLiCe") is True
    assert members(conversation) == {}


def test_names_that_differ_only_by_case_need_the_exact_one(conversation):
    User.objects.create_user("bob")
    User.objects.create_user("Bob")
    with pytest.raises(ShareRefused) as refused:
        set_member(conversation, "BOB", "viewer")
    assert refused.value.code == "unknown_user"
    set_member(conversation, "Bob", "viewer")
    set_member(conversation, "bob", "collaborator")
    assert members(conversation) == {"Bob": "viewer", "bob": "collaborator"}
    assert remove_member(conversation, "BOB") is False  # which one? neither
    assert remove_member(conversation, "Bob") is True
    assert members(conversation) == {"bob": "collaborator"}


def test_the_owner_in_another_case_is_still_the_owner(conversation):
    with pytest.raises(ShareRefused) as refused:
        set_member(conversation, "OLGA", "viewer")
    assert refused.value.code == "self_share"


def test_an_inactive_account_is_not_found_in_any_case(conversation):
    User.objects.create_user("carl", is_active=False)
    with pytest.raises(ShareRefused):
        set_member(conversation, "Carl", "viewer")
