"""PUT/GET/DELETE /api/credentials/git: the caller's own, the token taken once and never
shown again, encrypted at rest and bound to its row; a token or the signed-in session."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from agent.models import GitCredential, User
from agent.runs import git_credentials
from agent.web.api_tokens import create_token

# Committed rows and a flush afterwards: the credential views write their audit entries
# as requests do, and a rolled-back user under them failed the teardown's key check.
pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "ghp_0123456789abcdefSECRET"


def _client(user: User) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {create_token(user)[1]}")


def _put(client: Client, host: str, **body):
    return client.put(f"/api/credentials/git/{host}", json.dumps(body),
                      content_type="application/json")  # fmt: skip


def test_stored_listed_and_removed_without_the_token_ever_coming_back():
    ada = User.objects.create_user("ada")
    api = _client(ada)
    assert _put(api, "Git.Example.com", username="ada", token=TOKEN).status_code == 204
    assert _put(api, "127.0.0.1:8080", username="ci", token="t2").status_code == 204
    listed = api.get("/api/credentials/git")
    assert listed.json() == {"hosts": [{"host": "127.0.0.1:8080", "username": "ci"},
                                       {"host": "git.example.com", "username": "ada"}]}  # fmt: skip
    assert TOKEN not in listed.content.decode()
    assert _put(api, "git.example.com", username="ada2", token="new").status_code == 204
    assert git_credentials.for_url(ada.pk, "https://git.example.com/x.git").token == "new"
    assert api.delete("/api/credentials/git/git.example.com").status_code == 204
    assert api.get("/api/credentials/git").json()["hosts"] == [
        {"host": "127.0.0.1:8080", "username": "ci"}]  # fmt: skip


def test_encrypted_at_rest_and_bound_to_its_user_and_host():
    ada, bob = User.objects.create_user("ada"), User.objects.create_user("bob")
    git_credentials.store(ada, "git.example.com", "ada", TOKEN)
    row = GitCredential.objects.get(user=ada)
    assert TOKEN.encode() not in bytes(row.secret)
    # Copied into bob's row, or another host's, the sealed token does not open.
    GitCredential.objects.create(user=bob, host="git.example.com", username="x",
                                 secret=row.secret)  # fmt: skip
    GitCredential.objects.create(user=ada, host="evil.example", username="x", secret=row.secret)
    assert git_credentials.for_url(bob.pk, "https://git.example.com/r") is None
    assert git_credentials.for_url(ada.pk, "https://evil.example/r") is None
    assert git_credentials.for_url(ada.pk, "https://git.example.com/r").token == TOKEN
    # The port is part of the name when the URL has one.
    assert git_credentials.for_url(ada.pk, "https://git.example.com:8443/r") is None


def test_another_users_credentials_are_neither_listed_nor_removed():
    ada, bob = User.objects.create_user("ada"), User.objects.create_user("bob")
    git_credentials.store(ada, "git.example.com", "ada", TOKEN)
    bobs = _client(bob)
    assert bobs.get("/api/credentials/git").json() == {"hosts": []}
    assert bobs.delete("/api/credentials/git/git.example.com").status_code == 204
    assert GitCredential.objects.filter(user=ada).count() == 1


@pytest.mark.parametrize("host", ["bad_host", "a.example:0", "a.example:99999", "x" * 300,
                                  "a..example", "-a.example"])  # fmt: skip
def test_a_bad_host_is_400(host):
    api = _client(User.objects.create_user("ada"))
    response = _put(api, host, username="ada", token=TOKEN)
    assert response.status_code == 400 and response.json()["error"] == "bad_request"


@pytest.mark.parametrize("body", [{"username": "ada"}, {"token": TOKEN},
                                  {"username": "a:b", "token": TOKEN},
                                  {"username": "ada", "token": "line\nbreak"},
                                  {"username": 5, "token": TOKEN}])  # fmt: skip
def test_a_bad_username_or_token_is_400(body):
    api = _client(User.objects.create_user("ada"))
    assert _put(api, "git.example.com", **body).status_code == 400


def test_without_a_token_or_session_401_and_the_session_needs_csrf():
    assert Client().get("/api/credentials/git").status_code == 401
    ada = User.objects.create_user("ada", password="pw-ada-123")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(ada)
    assert browser.get("/api/credentials/git").status_code == 200
    refused = _put(browser, "git.example.com", username="ada", token=TOKEN)
    assert refused.status_code == 403 and not GitCredential.objects.exists()
    browser.get("/api/credentials/git")  # any page gives the CSRF cookie; here, none is set
    token = "a" * 32
    browser.cookies["csrftoken"] = token
    allowed = browser.put("/api/credentials/git/git.example.com",
                          json.dumps({"username": "ada", "token": TOKEN}),
                          content_type="application/json", HTTP_X_CSRFTOKEN=token)  # fmt: skip
    assert allowed.status_code == 204


def test_the_admin_shows_host_and_username_never_the_secret(admin_client):
    ada = User.objects.create_user("ada")
    git_credentials.store(ada, "git.example.com", "ada-name", TOKEN)
    row = GitCredential.objects.get()
    page = admin_client.get(f"/admin/agent/gitcredential/{row.pk}/change/").content.decode()
    assert "git.example.com" in page and "ada-name" in page
    assert TOKEN not in page and "secret" not in page.lower().replace("csrf", "")
    listing = admin_client.get("/admin/agent/gitcredential/").content.decode()
    assert "git.example.com" in listing
    assert admin_client.post(f"/admin/agent/gitcredential/{row.pk}/change/",
                             {"host": "x", "username": "y"}).status_code == 403  # fmt: skip
