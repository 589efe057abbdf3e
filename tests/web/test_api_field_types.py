"""A field of the wrong JSON type is a client's mistake, never a server error: every API
endpoint that takes a body answers 400 with the API's JSON error for a non-string where a
string belongs (a JSON object as ``model`` used to be a 500), and changes nothing; the
socket answers such frames with an error frame and stays open."""

from __future__ import annotations

import json

import pytest
from django.core.cache import cache
from django.test import Client

from agent.models import Conversation, Membership, User
from agent.web.api_tokens import create_token

pytestmark = pytest.mark.django_db

# What an attacker sends instead of a string: each JSON type but a string.
NOT_STRINGS = [{"$gt": ""}, ["claude-haiku-4-5"], 7, 1.5, True, None]


@pytest.fixture(autouse=True)
def fresh_counters():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def kim(settings, tmp_path):
    settings.HARNESS_WORKSPACES = tmp_path / "workspaces"
    settings.HARNESS_CONVERSATIONS_PER_HOUR = 1000
    user = User.objects.create_user("kim", password="pw-kim-12345")
    User.objects.create_user("lee", password="pw-lee-12345")
    conversation = Conversation.objects.create(owner=user, model="claude-haiku-4-5")
    _, token = create_token(user)
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}"), conversation


def send(client: Client, method: str, url: str, body: dict):
    return getattr(client, method.lower())(url, json.dumps(body), content_type="application/json")


def assert_json_400(response) -> None:
    assert response.status_code == 400, response.content
    answer = response.json()
    assert isinstance(answer["error"], str) and isinstance(answer["message"], str)


@pytest.mark.parametrize("value", NOT_STRINGS)
@pytest.mark.parametrize("field", ["model", "title", "agent"])
def test_creating_a_conversation_with_a_non_string_field_is_400(kim, field, value):
    client, _ = kim
    before = Conversation.objects.count()
    assert_json_400(send(client, "POST", "/api/conversations", {field: value}))
    assert Conversation.objects.count() == before


@pytest.mark.parametrize("value", NOT_STRINGS)
@pytest.mark.parametrize("field", ["model", "title", "thinking", "approval"])
def test_changing_a_conversation_to_a_non_string_is_400(kim, field, value):
    client, conversation = kim
    assert_json_400(send(client, "PATCH", f"/api/conversations/{conversation.id}",
                         {field: value}))  # fmt: skip
    conversation.refresh_from_db()
    assert conversation.model == "claude-haiku-4-5" and conversation.title == ""
    assert conversation.thinking == "" and conversation.approval == ""


@pytest.mark.parametrize("value", [v for v in NOT_STRINGS if v is not None])
@pytest.mark.parametrize(
    "body",
    [{"content": "@"}, {"content": "hi", "mode": "@"}, {"content": "hi", "images": "@"},
     {"content": "hi", "images": ["@"]}, {"content": "hi", "edit_of": "@"}],
)  # fmt: skip
def test_a_prompt_with_a_non_string_field_is_400_and_nothing_runs(kim, body, value):
    client, conversation = kim
    if body.get("edit_of") == "@" and isinstance(value, int) and not isinstance(value, bool):
        return  # a whole number is what edit_of takes
    if body.get("images") == "@" and isinstance(value, list):
        return  # a list of paths is what images takes
    filled = {k: (value if v == "@" else [value] if v == ["@"] else v) for k, v in body.items()}
    assert_json_400(send(client, "POST", f"/api/conversations/{conversation.id}/prompt", filled))
    conversation.refresh_from_db()
    assert conversation.state != Conversation.State.RUNNING and not conversation.events.exists()


@pytest.mark.django_db(transaction=True)  # a fork is made in a thread of its own
@pytest.mark.parametrize("value", [{"$gt": 0}, ["1"], "1", 1.5, True])
def test_regenerate_or_fork_naming_a_seq_by_a_non_number_is_400(kim, value):
    client, conversation = kim
    url = f"/api/conversations/{conversation.id}"
    assert_json_400(send(client, "POST", f"{url}/regenerate", {"of": value}))
    assert_json_400(send(client, "POST", f"{url}/fork", {"at": value}))
    assert Conversation.objects.count() == 1


@pytest.mark.parametrize("value", NOT_STRINGS)
def test_a_member_with_a_non_string_role_is_400(kim, value):
    client, conversation = kim
    url = f"/api/conversations/{conversation.id}/members/lee"
    assert_json_400(send(client, "PUT", url, {"role": value}))
    assert not Membership.objects.exists()


@pytest.mark.parametrize("value", [v for v in NOT_STRINGS if v is not None])
@pytest.mark.parametrize("field", ["decision", "reason"])
def test_an_approval_with_a_non_string_field_is_400(kim, field, value):
    client, conversation = kim
    body = {"decision": "deny", "reason": "no", field: value}
    url = f"/api/conversations/{conversation.id}/approvals/call-1"
    assert_json_400(send(client, "POST", url, body))
