"""POST/GET /api/projects (the network half) in process: what is refused before anything
runs, the caller's own projects only, interrupted clones settled."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from agent.models import Project, User
from agent.runs import git_remote
from agent.web.api_tokens import create_token

pytestmark = pytest.mark.django_db(transaction=True)


def _client(user: User) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {create_token(user)[1]}")


def _post(client: Client, **body):
    return client.post("/api/projects", json.dumps(body), content_type="application/json")


BAD_URLS = [
    "ssh://git@example.com/r.git",
    "git@example.com:r.git",
    "file:///etc/passwd",
    "ext::sh -c touch% /tmp/x",
    "/srv/r",
    "https://u:p@example.com/r.git",
    "https://tok@example.com/r",
    "http://",
    "https://example.com:99999/r",
    "ftp://example.com/r",
    "https://exa mple.com/r",
    "https://example.com/r?x=1",
    7,
    "",
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_bad_url_is_400_bad_url_and_nothing_is_made(url):
    api = _client(User.objects.create_user("ada"))
    response = _post(api, name="x", git_url=url)
    assert (response.status_code, response.json()["error"]) == (400, "bad_url"), url
    assert not Project.objects.exists()


def test_a_bad_name_or_branch_is_400():
    api = _client(User.objects.create_user("ada"))
    url = "https://example.com/r.git"
    assert _post(api, name="", git_url=url).status_code == 400
    assert _post(api, name="x" * 201, git_url=url).status_code == 400
    for branch in ("-f", "a..b", "a b", "x.lock", 3):
        assert _post(api, name="x", git_url=url, branch=branch).status_code == 400, branch
    assert not Project.objects.exists()


def test_projects_are_their_owners_alone():
    ada, bob = User.objects.create_user("ada"), User.objects.create_user("bob")
    mine = Project.objects.create(owner=ada, name="mine", git_url="https://e.example/r.git",
                                  state="ready", default_branch="main")  # fmt: skip
    assert _client(ada).get(f"/api/projects/{mine.id}").json() == {
        "id": str(mine.id), "name": "mine", "git_url": "https://e.example/r.git",
        "default_branch": "main", "state": "ready"}  # fmt: skip
    assert _client(bob).get(f"/api/projects/{mine.id}").status_code == 404
    assert _client(bob).get("/api/projects").json() == {"projects": []}
    assert [p["id"] for p in _client(ada).get("/api/projects").json()["projects"]] == [str(mine.id)]
    assert Client().get("/api/projects").status_code == 401


def test_at_most_three_clones_at_once_per_user():
    ada = User.objects.create_user("ada")
    for n in range(3):
        Project.objects.create(owner=ada, name=f"p{n}", git_url="https://e.example/r.git")
    response = _post(_client(ada), name="four", git_url="https://e.example/r.git")
    assert (response.status_code, response.json()["error"]) == (429, "throttled")


def test_a_clone_whose_server_stopped_reads_failed_not_cloning_for_ever(settings):
    ada = User.objects.create_user("ada")
    old = Project.objects.create(owner=ada, name="old", git_url="https://e.example/r.git")
    new = Project.objects.create(owner=ada, name="new", git_url="https://e.example/r.git")
    long_ago = timezone.now() - timedelta(seconds=settings.HARNESS_GIT_TIMEOUT + 600)
    Project.objects.filter(pk=old.pk).update(updated=long_ago)
    shown = _client(ada).get(f"/api/projects/{old.id}").json()
    assert shown["state"] == "failed" and shown["error"] == git_remote.INTERRUPTED
    assert _client(ada).get(f"/api/projects/{new.id}").json()["state"] == "cloning"


def test_the_signed_in_session_reaches_projects_too():
    ada = User.objects.create_user("ada", password="pw-ada-123")
    browser = Client()
    browser.force_login(ada)
    assert browser.get("/api/projects").json() == {"projects": []}
