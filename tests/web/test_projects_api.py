"""Projects in a server without a broker (a root test process: the one-shot sandbox runs
the git work as the owner's uid; the local bash sandbox gets the worktree's binds), and
bad bodies: each a 400 with the API's JSON error, nothing made."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from django.core.cache import cache
from django.test import Client

from agent.core.tools.bash import BashTool
from agent.models import Conversation, Project, User
from agent.runs import projects
from agent.runs.workspaces import conversation_workspace, workspace_for
from agent.web.api_tokens import create_token
from tests.conftest import require_bwrap

pytestmark = pytest.mark.django_db


@pytest.fixture
def kim(settings, tmp_path):
    require_bwrap()
    cache.clear()
    settings.HARNESS_WORKSPACES = tmp_path / "workspaces"
    settings.HARNESS_CONVERSATIONS_PER_HOUR = 1000
    user = User.objects.create_user("kim", password="pw-kim-12345")
    _, token = create_token(user)
    yield user, Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    cache.clear()


def send(client: Client, method: str, url: str, body=None):
    data = json.dumps(body) if body is not None else None
    return getattr(client, method.lower())(url, data, content_type="application/json")


def _bash(workspace, command: str) -> str:
    result = asyncio.run(BashTool(workspace).execute({"command": command}))
    assert not result.is_error, result.content
    return json.loads(result.content)["output"]


def test_a_project_without_a_broker(kim):
    user, client = kim
    made = send(client, "POST", "/api/projects", {"name": "local"}).json()
    assert made.get("state") == "ready", made
    response = send(client, "POST", "/api/conversations", {"project": made["id"]})
    assert response.status_code == 201, response.json()
    conversation = Conversation.objects.get(pk=response.json()["id"])
    workspace = conversation_workspace(conversation)
    out = _bash(workspace, "echo hi > a.txt; git status --short; git branch --show-current; id -u")
    status, branch, uid = out.split("\n")[:3]
    assert (status, branch) == ("?? a.txt", conversation.branch)
    if os.geteuid() == 0:  # the one-shot sandbox and bash run as the owner's uid
        assert os.stat(workspace.root / "a.txt").st_uid == int(uid) != 0
        assert os.stat(workspace.root / ".git").st_uid == int(uid)
    first = projects.checkpoint(conversation)
    assert first["files"] == ["a.txt"]
    _bash(workspace, "rm a.txt; echo b > b.txt")
    projects.checkpoint(conversation)
    done = projects.restore(conversation, first["id"])
    assert done["after"]["files"] == ["a.txt", "b.txt"]
    assert [f["path"] for f in projects.changes(conversation)["files"]] == ["a.txt"]
    # The user's own workspace shows nothing of the projects, to bash or the file tools.
    own = workspace_for(user.pk)
    assert _bash(own, "ls -A .harness-projects | wc -l").strip() == "0"
    listing = send(client, "GET", f"/api/conversations/{conversation.id}/changes").json()
    assert listing["files"][0]["status"] == "added"
    # Deleting the conversation removes its worktree (its branch stays in the repository).
    page = Client()
    page.force_login(user)
    assert page.post(f"/c/{conversation.id}/delete").status_code == 302
    assert not workspace.root.exists()


@pytest.mark.parametrize("value", [{"$gt": ""}, ["x"], 7, True, None, ""])
def test_bad_bodies_are_400_and_make_nothing(kim, value):
    user, client = kim
    response = send(client, "POST", "/api/projects", {"name": value})
    assert response.status_code == 400 and response.json()["error"] == "bad_request"
    assert not Project.objects.exists()
    if value is None or value == "":
        return
    response = send(client, "POST", "/api/conversations", {"project": value})
    assert response.status_code == 400 and response.json()["error"] == "bad_request"
    assert not Conversation.objects.exists()


def test_a_bad_base_or_a_strangers_project_makes_no_conversation(kim):
    user, client = kim
    made = send(client, "POST", "/api/projects", {"name": "p"}).json()
    for base in ("--orphan", "nope", ["main"]):
        response = send(client, "POST", "/api/conversations", {"project": made["id"], "base": base})
        assert response.status_code == 400, response.json()
    lee = User.objects.create_user("lee", password="pw-lee-12345")
    _, token = create_token(lee)
    other = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert send(other, "POST", "/api/conversations", {"project": made["id"]}).status_code == 404
    assert send(other, "GET", f"/api/projects/{made['id']}").status_code == 404
    assert not Conversation.objects.exists()
    conversation = Conversation.objects.create(owner=user, model="claude-haiku-4-5")
    for path in ("changes", "archive"):
        response = send(client, "GET", f"/api/conversations/{conversation.id}/{path}")
        assert response.json()["error"] == "not_in_project"
    for path, body in (("commit", {"message": 7}), ("restore", {"checkpoint": 7}),
                       ("prompt", {"content": "x", "edit_of": 1, "restore_files": "no"}),
                       ("regenerate", {"restore_files": 1})):  # fmt: skip
        response = send(client, "POST", f"/api/conversations/{conversation.id}/{path}", body)
        assert response.status_code == 400, (path, response.json())


def test_a_user_has_a_bounded_number_of_projects(kim):
    user, client = kim
    Project.objects.bulk_create(
        [Project(owner=user, name=f"p{i}") for i in range(projects.MAX_PROJECTS)]
    )
    response = send(client, "POST", "/api/projects", {"name": "one more"})
    assert response.status_code == 429 and response.json()["error"] == "too_many_projects"
    assert Project.objects.count() == projects.MAX_PROJECTS


def test_the_git_seam_runs_a_command_line_as_the_owner(kim):
    user, client = kim
    made = send(client, "POST", "/api/projects", {"name": "seam"}).json()
    done = projects.git(user.pk, made["id"], ["log", "--format=%s", "main"])
    assert (done["code"], done["out"].strip()) == (0, "Initial commit")
    refused = projects.git(user.pk, made["id"], ["ls-remote", "ext::sh -c touch% /tmp/x"])
    assert refused["code"] != 0 and "not allowed" in refused["err"], refused
