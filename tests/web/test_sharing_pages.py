"""Sharing on the pages (docs/API.md): the ownership matrix of every conversation page
and form for owner / collaborator / viewer / team member / stranger / anonymous; the
share dialog (add, change, remove, team, bad input); "Shared with me"; who wrote each
prompt (``data-author``); a viewer's page cannot prompt."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from agent.models import Attachment, Conversation, Event, Membership, User

pytestmark = pytest.mark.django_db

ROLES = ("owner", "collaborator", "viewer", "team", "stranger", "anonymous")
READS = {"owner", "collaborator", "viewer", "team"}
DRIVES = {"owner", "collaborator"}
OWNS = {"owner"}

# Every conversation page and form of harness_site/urls.py: name → (method, path after
# /c/<id>/, form data, the roles allowed).
PAGE_MATRIX = {
    "conversation": ("GET", "", None, READS),
    "export_md": ("GET", "export.md", None, READS),
    "export_json": ("GET", "export.json", None, READS),
    "conversation_files": ("GET", "files/", None, DRIVES),
    "download_file": ("GET", "files/download?path=note.txt", None, DRIVES),
    "rename": ("POST", "rename", {"title": "renamed"}, OWNS),
    "set_model": ("POST", "model", {"model": "claude-haiku-4-5"}, OWNS),
    "set_thinking": ("POST", "thinking", {"thinking": "low"}, OWNS),
    "set_approval": ("POST", "approval", {"approval": "ask"}, OWNS),
    "share": ("POST", "share", {"do": "team", "team": "on"}, OWNS),
    "delete": ("POST", "delete", {}, OWNS),
    "fork": ("POST", "fork", {}, READS),  # a copy of one's own
    "conversation_image": ("GET", "images/" + "ab" * 32, None, READS),  # an attached image
    "earlier_parts": ("GET", "earlier?before=100", None, READS),
    "conversation_list": ("GET", "list", None, READS),  # (lists the reader's own only)
    "set_pinned": ("POST", "pin", {"pinned": "1"}, OWNS),
    "set_archived": ("POST", "archive", {"archived": "1"}, OWNS),
    "set_instructions": ("POST", "instructions", {"instructions": "Be brief."}, DRIVES),
}
# Pages and endpoints of the signed-in user's own (no conversation in the URL): each acts
# on the caller's own things only (their tests: test_views, test_files_api, test_search…).
USER_SCOPED = ("home", "create_conversation", "files", "set_theme", "api_conversations",
               "api_agents", "api_usage", "api_files_root", "api_files", "api_search", "search",
               "healthz", "login", "logout", "upload",
               # Single sign-on: the requester's own session only (test_oidc).
               "oidc_authentication_init", "oidc_authentication_callback",
               # A CLI session's credential, not a user, is what it answers (test_llm_gateway).
               "llm_anthropic", "llm_openai",
               # The caller's own projects; anyone else's is 404 (test_projects_live).
               "api_projects", "api_project",
               # The caller's own git credentials (test_credentials_api).
               "api_git_credentials", "api_git_credential")  # fmt: skip


@pytest.fixture
def people(settings, tmp_path):
    from agent.runs.workspaces import workspace_path

    settings.HARNESS_WORKSPACES = tmp_path / "workspaces"
    users = {role: User.objects.create_user(name, password=f"pw-{name}-1234")
             for role, name in (("owner", "olga"), ("collaborator", "cole"), ("viewer", "vera"),
                                ("team", "tess"), ("stranger", "stan"))}  # fmt: skip
    root = workspace_path(users["owner"].pk)
    root.mkdir(parents=True)
    (root / "note.txt").write_text("olga's note")
    return users


def shared(people, *, team: bool = True) -> Conversation:
    conversation = Conversation.objects.create(owner=people["owner"], model="claude-haiku-4-5",
                                               title="shared one", team=team)  # fmt: skip
    Membership.objects.create(conversation=conversation, user=people["collaborator"],
                              role="collaborator")  # fmt: skip
    Membership.objects.create(conversation=conversation, user=people["viewer"], role="viewer")
    Attachment.objects.create(conversation=conversation, sha256="ab" * 32, media_type="image/gif",
                              size=len(GIF), data=GIF)  # fmt: skip
    return conversation


GIF = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;"


def client_for(people, role: str) -> Client:
    client = Client()
    if role != "anonymous":
        client.force_login(people[role])
    return client


def expected(role: str, allowed: set[str]) -> int | str:
    if role == "anonymous":
        return "login"
    if role in allowed:
        return "allowed"
    return 403 if role in READS else 404


def outcome(response) -> int | str:
    if response.status_code == 302 and "/accounts/login/" in response["Location"]:
        return "login"
    if response.status_code in (403, 404):
        return response.status_code
    return "allowed"


@pytest.mark.parametrize("role", ROLES)
def test_uploading_into_a_conversations_workspace_follows_the_role(people, role):
    """The page's upload for a shared conversation (``?conversation=``) lands in the
    owner's workspace, the one its runs work in: for those who may prompt there."""
    from agent.runs.workspaces import workspace_path

    conversation = shared(people, team=role != "stranger")
    response = client_for(people, role).put(
        f"/files/upload/from-{role}.txt?conversation={conversation.id}", b"hello",
        content_type="application/octet-stream",
    )  # fmt: skip
    landed = workspace_path(people["owner"].pk) / "uploads" / f"from-{role}.txt"
    expected_status = {"owner": 201, "collaborator": 201, "viewer": 403, "team": 403,
                       "stranger": 404, "anonymous": 401}[role]  # fmt: skip
    assert response.status_code == expected_status, response.content
    assert landed.exists() == (expected_status == 201)
    if role == "collaborator":
        assert not (workspace_path(people["collaborator"].pk) / "uploads").exists()


def test_an_attached_image_is_served_as_the_image_it_is_and_nothing_else(people):
    conversation = shared(people, team=False)
    response = client_for(people, "viewer").get(f"/c/{conversation.id}/images/{'ab' * 32}")
    assert response.status_code == 200 and response.content == GIF
    assert response["Content-Type"] == "image/gif"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Security-Policy"] == "sandbox; default-src 'none'"
    assert response["Content-Disposition"].startswith("inline")
    owner = client_for(people, "owner")
    assert owner.get(f"/c/{conversation.id}/images/{'cd' * 32}").status_code == 404
    other = Conversation.objects.create(owner=people["owner"], model="claude-haiku-4-5")
    # (an image is reached through its own conversation only)
    assert owner.get(f"/c/{other.id}/images/{'ab' * 32}").status_code == 404


def test_staff_who_may_view_conversations_see_the_images_the_admin_transcript_shows(people):
    from django.contrib.auth.models import Permission

    conversation = shared(people, team=False)
    staff = User.objects.create_user("sam", password="pw-sam-1234", is_staff=True)
    client = Client()
    client.force_login(staff)
    path = f"/c/{conversation.id}/images/{'ab' * 32}"
    assert client.get(path).status_code == 404  # staff alone: no
    staff.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    client.force_login(User.objects.get(pk=staff.pk))
    assert client.get(path).status_code == 200


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", PAGE_MATRIX)
def test_ownership_matrix_of_every_conversation_page(people, role, name):
    method, tail, data, allowed = PAGE_MATRIX[name]
    # (with the team on, everyone signed in reads it: the stranger's is a private one)
    conversation = shared(people, team=role != "stranger")
    client = client_for(people, role)
    path = f"/c/{conversation.id}/{tail}"
    response = client.get(path) if method == "GET" else client.post(path, data or {})
    assert outcome(response) == expected(role, allowed), (name, role, response.status_code)
    still = Conversation.objects.filter(id=conversation.id).first()
    if outcome(response) != "allowed":  # nothing changed
        assert still is not None and still.title == "shared one" and still.model == (
            "claude-haiku-4-5") and still.thinking == "" and still.approval == ""  # fmt: skip


def test_a_collaborators_files_panel_and_download_are_the_owners_workspace(people):
    conversation = shared(people)
    client = client_for(people, "collaborator")
    assert "note.txt" in client.get(f"/c/{conversation.id}/files/").content.decode()
    download = client.get(f"/c/{conversation.id}/files/download?path=note.txt")
    assert download.status_code == 200 and b"".join([download.content]) == b"olga's note"
    assert download["Content-Disposition"].startswith("attachment")


def page(people, role: str, conversation) -> str:
    response = client_for(people, role).get(f"/c/{conversation.id}/")
    assert response.status_code == 200
    return response.content.decode()


def test_a_viewers_page_watches_but_offers_no_prompt_and_no_owner_controls(people):
    conversation = shared(people)
    html = page(people, "viewer", conversation)
    assert re.search(r'<textarea id="prompt"[^>]* disabled', html)
    assert 'id="read-only-note"' in html and 'id="share-toggle"' not in html
    assert (
        'id="files-toggle"' not in html
        and 'action="/c/' + str(conversation.id) + '/delete"' not in html
    )
    assert 'data-role="viewer"' in html and "Watching olga" in html
    owner = page(people, "owner", conversation)
    assert 'id="share-toggle"' in owner and 'data-member="cole"' in owner
    assert 'id="share-team" checked' in owner.replace("checked ", "checked")
    collaborator = page(people, "collaborator", conversation)
    assert not re.search(r'<textarea id="prompt"[^>]* disabled', collaborator)
    assert 'id="share-toggle"' not in collaborator and 'id="files-toggle"' in collaborator


def test_the_sidebar_lists_what_is_shared_with_me_with_its_owner_and_role(people):
    conversation = shared(people, team=False)
    mine = Conversation.objects.create(owner=people["collaborator"], model="m", title="cole's own")
    html = page(people, "collaborator", mine)
    shared_list = html.split('id="shared-list"', 1)[1].split("</nav>", 1)[0]
    assert "Shared with me" in shared_list and "shared one" in shared_list
    assert f'data-conversation-id="{conversation.id}"' in shared_list
    assert 'data-role="collaborator"' in shared_list and "olga" in shared_list
    nothing = page(people, "owner", conversation).split('id="shared-list"', 1)[1].split("</nav>")[0]
    assert 'aria-labelledby="shared-heading" hidden>' in nothing and "conv-item" not in nothing
    stranger_home = Conversation.objects.create(owner=people["stranger"], model="m")
    assert "shared one" not in page(people, "stranger", stranger_home)


def test_user_parts_of_a_shared_conversation_name_their_author(people):
    conversation = shared(people)
    for seq, payload in enumerate([
        {"type": "user", "content": "before sharing"},  # no author: the owner's
        {"type": "user", "content": "from cole", "author": "cole"},
    ], start=1):  # fmt: skip
        Event.objects.create(conversation=conversation, seq=seq, type="user",
                             payload={**payload, "seq": seq, "timestamp": 1})  # fmt: skip
    conversation.last_seq = 2
    conversation.save()
    html = page(people, "viewer", conversation)
    assert re.search(r'data-part="user" data-seq="1"[^>]*data-author="olga"', html)
    assert re.search(r'data-part="user" data-seq="2"[^>]*data-author="cole"', html)
    assert '<span class="user-author">cole</span>' in html


def test_an_author_name_is_escaped(people):
    conversation = shared(people)
    Event.objects.create(conversation=conversation, seq=1, type="user", payload={
        "type": "user", "seq": 1, "timestamp": 1, "content": "x",
        "author": '"><img src=x onerror=alert(1)>'})  # fmt: skip
    conversation.last_seq = 1
    conversation.save()
    html = page(people, "owner", conversation)
    assert "<img src=x" not in html and "&lt;img src=x" in html


# -- the share dialog -------------------------------------------------------------------------
def share(people, conversation, **data):
    return client_for(people, "owner").post(f"/c/{conversation.id}/share", data,
                                            HTTP_HX_REQUEST="true")  # fmt: skip


def test_the_share_dialog_adds_changes_and_removes_members_and_opens_to_the_team(people):
    conversation = Conversation.objects.create(owner=people["owner"], model="m")
    answer = share(people, conversation, do="add", username="tess", role="viewer")
    assert answer.status_code == 200 and 'data-member="tess" data-role="viewer"' in (
        answer.content.decode())  # fmt: skip
    share(people, conversation, do="add", username="tess", role="collaborator")
    assert Membership.objects.get(conversation=conversation).role == "collaborator"
    answer = share(people, conversation, do="remove", username="tess")
    assert "data-member" not in answer.content.decode()
    assert not Membership.objects.filter(conversation=conversation).exists()
    share(people, conversation, do="team", team="on")
    conversation.refresh_from_db()
    assert conversation.team
    share(people, conversation, do="team")
    conversation.refresh_from_db()
    assert not conversation.team


@pytest.mark.parametrize(("data", "says"), [
    ({"do": "add", "username": "nobody", "role": "viewer"}, "No active user"),
    ({"do": "add", "username": "olga", "role": "viewer"}, "own this conversation"),
    ({"do": "add", "username": "tess", "role": "owner"}, "must be one of"),
    ({"do": "explode"}, "Unknown sharing action"),
])  # fmt: skip
def test_the_share_dialog_says_why_bad_input_is_refused_and_stores_nothing(people, data, says):
    conversation = Conversation.objects.create(owner=people["owner"], model="m")
    answer = share(people, conversation, **data)  # the dialog (htmx swaps a 200 only)
    assert answer.status_code == 200 and says in answer.content.decode()
    assert 'id="share-error" role="alert"' in answer.content.decode()
    plain = client_for(people, "owner").post(f"/c/{conversation.id}/share", data)  # no script
    assert plain.status_code == 400 and says in plain.content.decode()
    assert not Membership.objects.filter(conversation=conversation).exists()


def test_an_inactive_user_cannot_be_added_nor_read_a_team_conversation(people):
    conversation = shared(people)
    tess = people["team"]
    tess.is_active = False
    tess.save()
    answer = share(people, conversation, do="add", username="tess", role="viewer")
    assert "No active user" in answer.content.decode()
    from agent.access import conversation_for

    assert conversation_for(tess, conversation.id) is None


def test_the_readable_lookup_the_fork_uses_gives_any_reader_and_nobody_else(people):
    from agent.access import conversation_for as readable

    conversation = shared(people)
    for role in (*READS, "stranger"):  # the team's: every active user reads it
        assert readable(people[role], conversation.id).id == conversation.id
    conversation.team = False
    conversation.save()
    for role in ("team", "stranger"):
        assert readable(people[role], conversation.id) is None
    assert readable(people["viewer"], conversation.id).role == "viewer"


def _with_a_subdirectorys_notes(people) -> Conversation:
    """A conversation whose model history holds src/AGENTS.md of the owner's workspace
    beside a read's result (as the loop leaves it: agent/core/loop.py, _record_result), and
    whose events, what a viewer reads, do not."""
    conversation = shared(people, team=False)
    result = json.dumps({"content": "a = 1\n"})
    notes = "Instructions for files under src/ (from src/AGENTS.md):\nDeploy key: OLGA-SECRET-42"
    conversation.history = [
        {"role": "user", "content": [{"type": "text", "text": "read src/a.py"}], "_seq": 1},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read",
                                           "input": {"path": "src/a.py"}}], "_seq": 2},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [{"type": "text", "text": result},
                                                  {"type": "text", "text": notes}],
                                      "is_error": False}], "_seq": 3},
        {"role": "assistant", "content": [{"type": "text", "text": "a is 1"}], "_seq": 4},
    ]  # fmt: skip
    payloads = [
        {"type": "user", "content": "read src/a.py"},
        {"type": "tool_call", "id": "t1", "name": "read", "input": {"path": "src/a.py"}},
        {"type": "tool_result", "id": "t1", "result": result, "isError": False},
        {"type": "text", "content": "a is 1"},
    ]  # fmt: skip
    for seq, payload in enumerate(payloads, 1):
        Event.objects.create(conversation=conversation, seq=seq, type=payload["type"],
                             payload={**payload, "seq": seq, "timestamp": 1})  # fmt: skip
    conversation.last_seq = len(payloads)
    conversation.save()
    return conversation


@pytest.mark.parametrize("role", ["viewer", "collaborator"])
def test_a_readers_fork_holds_none_of_the_owners_agents_md_notes(people, role):
    conversation = _with_a_subdirectorys_notes(people)
    seen = client_for(people, role).get(f"/c/{conversation.id}/").content.decode()
    assert "OLGA-SECRET-42" not in seen  # what the reader may see: not the notes
    response = client_for(people, role).post(f"/c/{conversation.id}/fork")  # the attack
    fork = Conversation.objects.exclude(id=conversation.id).get(owner=people[role])
    assert response.status_code == 302 and str(fork.id) in response["Location"]
    assert "OLGA-SECRET-42" not in json.dumps(fork.history)
    assert "Instructions for files under" not in json.dumps(fork.history)
    result = fork.history[2]["content"][0]
    assert result["content"] == json.dumps({"content": "a = 1\n"})  # the result, as shown
    assert [m["role"] for m in fork.history] == ["user", "assistant", "user", "assistant"]


def test_the_owners_own_fork_keeps_the_notes(people):
    conversation = _with_a_subdirectorys_notes(people)
    client_for(people, "owner").post(f"/c/{conversation.id}/fork")
    fork = Conversation.objects.exclude(id=conversation.id).get(owner=people["owner"])
    assert "OLGA-SECRET-42" in json.dumps(fork.history)  # their own workspace's, for them
