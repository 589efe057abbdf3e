"""Rate limits: sign-in lockouts (django-axes), bad bearer tokens per address, new
conversations per user; and an oversized API body answers in the API's JSON shape."""

from __future__ import annotations

import json

import pytest
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from agent.models import Conversation, User
from agent.web.api_tokens import create_token

pytestmark = pytest.mark.django_db

PASSWORD = "pw-grace-1234"


@pytest.fixture(autouse=True)
def fresh_counters():
    cache.clear()  # the counters live in the process's cache, not the test database
    yield
    cache.clear()


@pytest.fixture
def grace():
    return User.objects.create_user(username="grace", password=PASSWORD)


def sign_in(client: Client, username: str, password: str, url: str = "/accounts/login/"):
    return client.post(url, {"username": username, "password": password})


# -- Sign-in ------------------------------------------------------------------------------


def test_repeated_failed_sign_ins_lock_the_username_out_from_that_address(grace, settings):
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        response = sign_in(client, "grace", "wrong-password")
    response = sign_in(client, "grace", PASSWORD)  # the right password, too late
    assert response.status_code == 429
    assert int(response["Retry-After"]) == settings.HARNESS_LOGIN_COOLOFF_MINUTES * 60
    page = response.content.decode()
    assert "Too many failed sign-in attempts" in page and 'data-code="login_locked_out"' in page
    assert "_auth_user_id" not in client.session


def test_a_lockout_holds_one_username_at_one_address_only(grace, settings):
    User.objects.create_user(username="henry", password="pw-henry-1234")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(Client(), "grace", "wrong-password")
    assert sign_in(Client(), "grace", PASSWORD).status_code == 429
    # Another user at the same address, and the same user elsewhere, still sign in.
    assert sign_in(Client(), "henry", "pw-henry-1234").status_code == 302
    elsewhere = Client(REMOTE_ADDR="203.0.113.9")
    assert sign_in(elsewhere, "grace", PASSWORD).status_code == 302


def test_the_admin_sign_in_is_locked_out_too(settings):
    User.objects.create_superuser("root", password="pw-root-1234")
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        response = sign_in(client, "root", "wrong-password", "/admin/login/")
        assert response.status_code in (200, 429)
    response = sign_in(client, "root", "pw-root-1234", "/admin/login/")
    assert response.status_code == 429
    assert client.get("/admin/").status_code == 302  # still not signed in


def test_a_successful_sign_in_resets_the_failures(grace, settings):
    client = Client()
    for _ in range(2):
        for _ in range(settings.AXES_FAILURE_LIMIT - 1):
            sign_in(client, "grace", "wrong-password")
        assert sign_in(client, "grace", PASSWORD).status_code == 302
        client.logout()


# -- Bearer tokens ------------------------------------------------------------------------


def test_an_address_sending_bad_tokens_is_throttled_with_retry_after(grace, settings):
    settings.HARNESS_API_TOKEN_FAILURES = 3
    guesser = Client(HTTP_AUTHORIZATION="Bearer hrn_guess")
    for _ in range(3):
        assert guesser.get("/api/conversations").status_code == 401
    response = guesser.get("/api/conversations")
    assert response.status_code == 429 and response.json()["error"] == "throttled"
    assert response.json()["message"] and 1 <= int(response["Retry-After"]) <= 60
    # The whole address waits (a right guess now would not be told apart) ...
    _, token = create_token(grace)
    same_address = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert same_address.get("/api/conversations").status_code == 429
    # ... and no other.
    other = Client(HTTP_AUTHORIZATION=f"Bearer {token}", REMOTE_ADDR="203.0.113.9")
    assert other.get("/api/conversations").status_code == 200


def test_a_throttled_address_costs_no_database_query(settings):
    settings.HARNESS_API_TOKEN_FAILURES = 1
    guesser = Client(HTTP_AUTHORIZATION="Bearer hrn_guess")
    guesser.get("/api/conversations")
    with CaptureQueriesContext(connection) as queries:
        assert guesser.get("/api/conversations").status_code == 429
    assert len(queries) == 0


def test_an_authenticated_api_request_costs_one_query_for_its_token(grace):
    _, token = create_token(grace)
    api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert api.get("/api/conversations").status_code == 200  # records last_used
    with CaptureQueriesContext(connection) as queries:
        assert api.get("/api/conversations").status_code == 200
    # The token (with its user) and the listing; last_used is written once a minute.
    assert len(queries) == 2, [q["sql"] for q in queries]
    assert "agent_apitoken" in queries[0]["sql"]


# -- New conversations --------------------------------------------------------------------


def test_api_conversation_creation_is_throttled_per_user(grace, settings):
    settings.HARNESS_CONVERSATIONS_PER_HOUR = 2
    _, token = create_token(grace)
    api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    for _ in range(2):
        assert (
            api.post("/api/conversations", "{}", content_type="application/json").status_code == 201
        )
    response = api.post("/api/conversations", "{}", content_type="application/json")
    assert response.status_code == 429 and response.json()["error"] == "throttled"
    assert "2 conversations" in response.json()["message"]
    assert 1 <= int(response["Retry-After"]) <= 3600
    assert Conversation.objects.filter(owner=grace).count() == 2
    henry = User.objects.create_user(username="henry", password="pw-henry-1234")
    _, other = create_token(henry)
    other_api = Client(HTTP_AUTHORIZATION=f"Bearer {other}")
    assert (
        other_api.post("/api/conversations", "{}", content_type="application/json").status_code
        == 201
    )


def test_browser_conversation_creation_is_throttled_with_a_clear_message(grace, settings):
    settings.HARNESS_CONVERSATIONS_PER_HOUR = 2
    client = Client()
    client.force_login(grace)
    for n in range(2):
        assert client.post("/c/new/").status_code == 302
        # used, so the next "New conversation" makes one (an empty one would be reused)
        Conversation.objects.filter(owner=grace, title="").update(title=f"used {n}")
    response = client.post("/c/new/")
    assert response.status_code == 429 and response["Retry-After"]
    page = response.content.decode()
    assert 'data-code="throttled"' in page and "started 2 conversations this hour" in page
    assert Conversation.objects.filter(owner=grace).count() == 2


def test_deleting_every_conversation_does_not_get_around_the_limit(grace, settings):
    settings.HARNESS_CONVERSATIONS_PER_HOUR = 1
    client = Client()
    client.force_login(grace)
    assert client.get("/").status_code == 302  # the first conversation, made for you
    Conversation.objects.filter(owner=grace).delete()
    assert client.get("/").status_code == 429
    assert not Conversation.objects.filter(owner=grace).exists()


# -- Oversized bodies ---------------------------------------------------------------------


def test_an_oversized_api_body_is_a_json_413(grace, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    _, token = create_token(grace)
    api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    conversation = Conversation.objects.create(owner=grace, model="claude-haiku-4-5")
    big = json.dumps({"title": "x", "content": "y" * 5000})
    for path in ("/api/conversations", f"/api/conversations/{conversation.id}/prompt"):
        response = api.post(path, big, content_type="application/json")
        assert response.status_code == 413, path
        assert response["Content-Type"] == "application/json"
        assert (
            response.json()["error"] == "too_large" and "1,000 bytes" in response.json()["message"]
        )
