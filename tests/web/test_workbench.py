"""The workbench around a conversation: reusing an empty one, the sidebar's controls, the
welcome, the model switch without a reload, no internal labels, export from the page."""

from __future__ import annotations

import json

import pytest
from django.core.cache import cache

from agent.models import Conversation, Event, Project

pytestmark = pytest.mark.django_db


def add_event(conversation, payload):
    seq = conversation.last_seq + 1
    stamped = {**payload, "seq": seq, "timestamp": 1_700_000_000_000}
    Event.objects.create(conversation=conversation, seq=seq, type=payload["type"], payload=stamped)
    conversation.last_seq = seq
    conversation.save()


# -- 2. "New conversation" reuses the newest empty one ------------------------------------


def test_new_conversation_reuses_the_newest_empty_one(client, ada, settings):
    cache.clear()  # the hourly counters live in the cache, shared by the whole run
    settings.HARNESS_CONVERSATIONS_PER_HOUR = 1
    first = client.post("/c/new/")
    assert first.status_code == 302
    for _ in range(4):  # reusing does not count towards the hourly limit
        again = client.post("/c/new/")
        assert again.status_code == 302 and again["Location"] == first["Location"]
    assert Conversation.objects.filter(owner=ada).count() == 1


def test_a_used_conversation_is_not_reused(client, ada, bob):
    titled = Conversation.objects.create(owner=ada, model="m", title="named")
    spoken = Conversation.objects.create(owner=ada, model="m")
    add_event(spoken, {"type": "user", "content": "hi"})
    Conversation.objects.create(owner=bob, model="m")  # someone else's empty one
    location = client.post("/c/new/")["Location"]
    made = Conversation.objects.get(owner=ada, title="", last_seq=0)
    assert location == f"/c/{made.id}/" and made.id not in (titled.id, spoken.id)


def test_an_archived_configured_or_project_empty_one_is_not_reused(client, ada):
    project = Project.objects.create(owner=ada, name="p", state=Project.State.READY)
    put_away = [
        Conversation.objects.create(owner=ada, model="m", archived=True),
        Conversation.objects.create(owner=ada, model="m", instructions="Be brief."),
        Conversation.objects.create(owner=ada, model="m", project=project),
    ]
    location = client.post("/c/new/")["Location"]
    made = Conversation.objects.exclude(id__in=[c.id for c in put_away]).get(owner=ada)
    assert location == f"/c/{made.id}/"


# -- 6. Export from the page ----------------------------------------------------------------


def test_one_exports_ones_own_conversation_as_markdown_and_json(client, ada):
    conversation = Conversation.objects.create(owner=ada, model="m", title="Plans")
    add_event(conversation, {"type": "user", "content": "hello there"})
    page = client.get(f"/c/{conversation.id}/").content.decode()
    for extension in ("md", "json"):
        assert f'href="/c/{conversation.id}/export.{extension}"' in page
    md = client.get(f"/c/{conversation.id}/export.md")
    assert md.status_code == 200 and md["Content-Type"].startswith("text/markdown")
    assert md["Content-Disposition"] == f'attachment; filename="conversation-{conversation.id}.md"'
    assert "# Plans" in md.content.decode() and "hello there" in md.content.decode()
    js = client.get(f"/c/{conversation.id}/export.json")
    assert js.status_code == 200 and js["Content-Disposition"].startswith("attachment")
    body = json.loads(js.content)
    assert body["title"] == "Plans" and body["events"][0]["content"] == "hello there"


def test_another_users_conversation_does_not_export(client, ada, bob):
    theirs = Conversation.objects.create(owner=bob, model="m", title="bob's secret")
    for extension in ("md", "json"):
        assert client.get(f"/c/{theirs.id}/export.{extension}").status_code == 404
    client.logout()
    assert client.get(f"/c/{theirs.id}/export.md").status_code == 302  # to sign in


# -- 5. No internal labels; the offline notice can be dismissed --------------------------


def test_no_internal_labels_are_shown(client, ada):
    conversation = Conversation.objects.create(owner=ada, model="m")
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert "(seed)" not in page and "seed" not in page.lower()


def test_the_offline_notice_has_a_dismiss_control(client, ada, settings):
    settings.ANTHROPIC_API_KEY = None
    conversation = Conversation.objects.create(owner=ada, model="m")
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert 'id="offline-banner"' in page and 'id="offline-dismiss"' in page
    assert page.count("answers are scripted") == 1


# -- 1. An empty conversation's welcome ---------------------------------------------------


def test_an_empty_conversation_welcomes_with_the_demos_suggestions_offline(
    client, ada, settings, monkeypatch
):
    settings.ANTHROPIC_API_KEY = None
    settings.HARNESS_BASH = "sandbox"
    monkeypatch.setattr("agent.runs.sandbox.bwrap_path", lambda: "/usr/bin/bwrap")
    conversation = Conversation.objects.create(owner=ada, model="m")
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert 'id="welcome"' in page
    for suggestion in ("list files", "write hello.py", "run ls -la"):
        assert f'data-suggestion="{suggestion}"' in page


@pytest.mark.parametrize(
    ("mode", "bwrap", "bash_enabled"),
    [
        ("sandbox", None, True),
        ("off", "/usr/bin/bwrap", True),
        ("sandbox", "/usr/bin/bwrap", False),
    ],
)
def test_the_demo_offers_no_command_when_bash_cannot_run(
    client, ada, settings, monkeypatch, mode, bwrap, bash_enabled
):
    """No bubblewrap (a fresh `make run` without it), bash off, or bash off for this user:
    neither the welcome nor the banner suggests "run ls -la", which could only fail."""
    settings.ANTHROPIC_API_KEY = None
    settings.HARNESS_BASH = mode
    monkeypatch.setattr("agent.runs.sandbox.bwrap_path", lambda: bwrap)
    ada.bash_enabled = bash_enabled
    ada.save()
    conversation = Conversation.objects.create(owner=ada, model="m")
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert "ls -la" not in page
    assert 'data-suggestion="list files"' in page and 'data-suggestion="write hello.py"' in page
    assert "Try “list files” or “write hello.py”." in page


def test_the_banner_names_the_welcomes_suggestions(client, ada, settings, monkeypatch):
    settings.ANTHROPIC_API_KEY = None
    settings.HARNESS_BASH = "sandbox"
    monkeypatch.setattr("agent.runs.sandbox.bwrap_path", lambda: "/usr/bin/bwrap")
    conversation = Conversation.objects.create(owner=ada, model="m")
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert "Try “list files”, “write hello.py” or “run ls -la”." in page


def test_a_conversation_with_parts_has_no_welcome(client, ada, settings):
    settings.ANTHROPIC_API_KEY = "sk-ant-test"
    empty = Conversation.objects.create(owner=ada, model="m")
    page = client.get(f"/c/{empty.id}/").content.decode()
    assert 'id="welcome"' in page and 'data-suggestion="list files"' not in page
    spoken = Conversation.objects.create(owner=ada, model="m")
    add_event(spoken, {"type": "user", "content": "hi"})
    assert 'id="welcome"' not in client.get(f"/c/{spoken.id}/").content.decode()


# -- 3. The sidebar: running marks, rename and delete per entry ----------------------------


def test_the_sidebar_marks_running_conversations_and_has_controls_per_entry(client, ada):
    running = Conversation.objects.create(owner=ada, model="m", title="busy one",
                                          state=Conversation.State.RUNNING)  # fmt: skip
    idle = Conversation.objects.create(owner=ada, model="m", title="quiet one")
    page = client.get(f"/c/{idle.id}/").content.decode()
    assert page.count('class="conv-running" role="img" aria-label="Running"') == 1
    start = page.index(f'data-conversation-id="{running.id}"')
    entry = page[start : page.index("</details></div>", start)]
    assert 'class="conv-running"' in entry
    for c in (running, idle):
        assert f'action="/c/{c.id}/rename" class="conv-rename"' in page
        assert f'action="/c/{c.id}/delete" class="conv-delete" data-confirm=' in page


def test_sidebar_actions_go_back_to_the_page_they_were_used_on(client, ada):
    here = Conversation.objects.create(owner=ada, model="m", title="here")
    other = Conversation.objects.create(owner=ada, model="m", title="other")
    back = client.post(f"/c/{other.id}/rename", {"title": "renamed", "next": f"/c/{here.id}/"})
    assert back["Location"] == f"/c/{here.id}/"
    other.refresh_from_db()
    assert other.title == "renamed"
    away = client.post(f"/c/{other.id}/rename", {"title": "x", "next": "https://evil.example/"})
    assert away["Location"] == f"/c/{other.id}/"
    gone = client.post(f"/c/{other.id}/delete", {"next": f"/c/{here.id}/"})
    assert gone["Location"] == f"/c/{here.id}/"
    assert not Conversation.objects.filter(id=other.id).exists()


# -- 4. The model changes without a reload -------------------------------------------------


def test_the_pages_model_select_saves_without_a_redirect(client, ada):
    conversation = Conversation.objects.create(owner=ada, model="claude-haiku-4-5")
    url = f"/c/{conversation.id}/model"
    saved = client.post(url, {"model": "claude-opus-4-5"}, headers={"HX-Request": "true"})
    assert saved.status_code == 204
    conversation.refresh_from_db()
    assert conversation.model == "claude-opus-4-5"
    unknown = client.post(url, {"model": "no-such-model"}, headers={"HX-Request": "true"})
    assert unknown.status_code == 400
    plain = client.post(url, {"model": "claude-sonnet-4-5"})  # the no-JS form
    assert plain.status_code == 302 and plain["Location"] == f"/c/{conversation.id}/"
    conversation.refresh_from_db()
    assert conversation.model == "claude-sonnet-4-5"


# -- 6. Every part's time on hover ----------------------------------------------------------


def test_parts_carry_their_events_time(client, ada):
    conversation = Conversation.objects.create(owner=ada, model="m")
    add_event(conversation, {"type": "user", "content": "hi"})
    add_event(conversation, {"type": "tool_call", "id": "t1", "name": "read",
                             "input": {"path": "a"}})  # fmt: skip
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert 'data-part="user" data-seq="1" data-ts="1700000000000"' in page
    times = page[page.index('id="part-times"') :]
    assert '"1": 1700000000000' in times and '"2": 1700000000000' in times
