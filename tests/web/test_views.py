"""Conversation pages and actions: owner checks, transcript rendering, hooks, CSP."""

from __future__ import annotations

import json
import uuid

import pytest

from agent.models import Conversation, Event, User
from agent.ui.paging import PAGE

pytestmark = pytest.mark.django_db


def add_events(conversation, *payloads):
    for seq, payload in enumerate(payloads, start=conversation.last_seq + 1):
        Event.objects.create(conversation=conversation, seq=seq, type=payload["type"],
                             payload={**payload, "seq": seq, "timestamp": 1})  # fmt: skip
        conversation.last_seq = seq
    conversation.save()


def test_home_creates_a_first_conversation_and_redirects_to_it(client, ada):
    response = client.get("/")
    conversation = Conversation.objects.get(owner=ada)
    assert response.status_code == 302 and response["Location"] == f"/c/{conversation.id}/"


def test_home_goes_to_the_newest_conversation(client, ada):
    Conversation.objects.create(owner=ada, model="m", title="old")
    newer = Conversation.objects.create(owner=ada, model="m", title="new")
    assert client.get("/")["Location"] == f"/c/{newer.id}/"


def test_another_users_conversation_is_404_everywhere(client, ada, bob):
    theirs = Conversation.objects.create(owner=bob, model="m", title="bob's secret")
    assert client.get(f"/c/{theirs.id}/").status_code == 404
    for action in ("rename", "delete", "model"):
        assert (
            client.post(f"/c/{theirs.id}/{action}", {"title": "x", "model": "m"}).status_code == 404
        )
    theirs.refresh_from_db()
    assert theirs.title == "bob's secret"
    assert client.get(f"/c/{uuid.uuid4()}/").status_code == 404


def test_anonymous_user_is_sent_to_login(client):
    conversation_id = uuid.uuid4()
    response = client.get(f"/c/{conversation_id}/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_page_renders_the_transcript_with_its_hooks(client, ada):
    conversation = Conversation.objects.create(owner=ada, model="claude-haiku-4-5", title="t")
    add_events(
        conversation,
        {"type": "user", "content": "read <b>it</b>"},
        {"type": "status", "state": "thinking"},
        {"type": "reasoning", "content": "hmm"},
        {"type": "text", "content": "Reading **now** <script>alert(1)</script>"},
        {"type": "tool_call", "id": "toolu_1", "name": "read", "input": {"path": "a.txt"}},
        {"type": "tool_result", "id": "toolu_1", "result": json.dumps({"content": "l\n" * 150}),
         "isError": False},
        {"type": "tool_call", "id": "toolu_2", "name": "bash", "input": {"command": "false"}},
        {"type": "tool_result", "id": "toolu_2", "isError": True,
         "result": json.dumps({"error": "command exited with status 1", "output": ""})},
        {"type": "error", "message": "Overloaded", "code": "overloaded"},
        {"type": "status", "state": "idle"},
    )  # fmt: skip
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert 'data-part="user" data-seq="1"' in page and "read &lt;b&gt;it&lt;/b&gt;" in page
    assert 'data-part="reasoning" data-seq="3"' in page
    assert 'data-part="text" data-seq="4"' in page and "<strong>now</strong>" in page
    assert "<script>alert" not in page
    assert 'data-tool-name="read" data-tool-status="ok"' in page
    assert "... (50 more lines)" in page and 'class="tool-result"' in page
    assert 'data-tool-name="bash" data-tool-status="error"' in page
    assert "command exited with status 1" in page
    assert 'data-part="error" data-seq="9"' in page
    assert 'id="status" data-state="idle"' in page
    for hook in ('id="messages"', 'id="prompt"', 'id="cancel"', 'id="help"', 'data-ws="closed"'):
        assert hook in page
    assert f'ws-connect="/ws/c/{conversation.id}/"' in page


def test_page_embeds_the_users_prompt_history_as_data(client, ada):
    ada.prompt_history = ["first", "</script><script>alert(1)</script>"]
    ada.save()
    conversation = Conversation.objects.create(owner=ada, model="m")
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert '<script id="prompt-history" type="application/json">' in page
    assert "</script><script>alert(1)" not in page


def test_rename_delete_and_model_change_own_conversations(client, ada):
    conversation = Conversation.objects.create(owner=ada, model="claude-haiku-4-5")
    client.post(f"/c/{conversation.id}/rename", {"title": "  My   work  "})
    client.post(f"/c/{conversation.id}/model", {"model": "claude-sonnet-4-5"})
    conversation.refresh_from_db()
    assert conversation.title == "My work" and conversation.model == "claude-sonnet-4-5"
    client.post(f"/c/{conversation.id}/model", {"model": "not-a-model"})
    conversation.refresh_from_db()
    assert conversation.model == "claude-sonnet-4-5"
    assert client.post(f"/c/{conversation.id}/delete").status_code == 302
    assert not Conversation.objects.filter(id=conversation.id).exists()


def test_the_page_sets_the_thinking_level_of_its_own_conversation_only(client, ada):
    conversation = Conversation.objects.create(owner=ada, model="claude-haiku-4-5")
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert '<select name="thinking" id="thinking"' in page
    assert '<option value="off" selected>' in page  # HARNESS_THINKING is 0
    answer = client.post(
        f"/c/{conversation.id}/thinking", {"thinking": "high"}, HTTP_HX_REQUEST="true"
    )
    assert answer.status_code == 204
    conversation.refresh_from_db()
    assert conversation.thinking == "high"
    assert '<option value="high" selected>' in client.get(f"/c/{conversation.id}/").content.decode()
    bad = client.post(f"/c/{conversation.id}/thinking", {"thinking": "max"}, HTTP_HX_REQUEST="true")
    assert bad.status_code == 400
    other = Conversation.objects.create(owner=User.objects.create(username="eve"), model="m")
    assert client.post(f"/c/{other.id}/thinking", {"thinking": "low"}).status_code == 404
    other.refresh_from_db()
    assert other.thinking == ""


def test_the_page_sets_the_tool_approval_of_its_own_conversation_only(client, ada, settings):
    settings.HARNESS_APPROVAL = "ask"
    conversation = Conversation.objects.create(owner=ada, model="claude-haiku-4-5")
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert '<select name="approval" id="approval"' in page
    assert '<option value="ask" selected>' in page  # the deployment's default
    answer = client.post(
        f"/c/{conversation.id}/approval", {"approval": "read_only"}, HTTP_HX_REQUEST="true"
    )
    assert answer.status_code == 204
    conversation.refresh_from_db()
    assert conversation.approval == "read_only"
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert '<option value="read_only" selected>' in page
    bad = client.post(
        f"/c/{conversation.id}/approval", {"approval": "yolo"}, HTTP_HX_REQUEST="true"
    )
    assert bad.status_code == 400
    other = Conversation.objects.create(owner=User.objects.create(username="eve"), model="m")
    assert client.post(f"/c/{other.id}/approval", {"approval": "ask"}).status_code == 404
    other.refresh_from_db()
    assert other.approval == ""


def test_the_page_shows_a_compaction_and_how_full_the_context_is(client, ada):
    conversation = Conversation.objects.create(
        owner=ada, model="m", context_tokens=50_000, context_window=200_000, last_seq=2
    )
    text = "**Earlier**: <img src=x onerror=alert(1)>"
    summary = {"type": "compaction", "seq": 2, "timestamp": 1, "summary": text,
               "through_seq": 1, "tokens_before": 160_000, "tokens_after": 9_000}  # fmt: skip
    Event.objects.create(
        conversation=conversation,
        seq=1,
        type="user",
        payload={"type": "user", "seq": 1, "timestamp": 1, "content": "hi"},
    )
    Event.objects.create(conversation=conversation, seq=2, type="compaction", payload=summary)
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert 'data-part="compaction" data-seq="2"' in page
    assert "160,000 → 9,000 tokens" in page and "<strong>Earlier</strong>" in page
    assert "onerror" not in page  # the summary is model text: sanitized
    assert 'id="context-gauge"' in page and "context 25%" in page
    assert 'name="action" value="compact"' in page


def test_the_sidebar_shows_this_months_spend_against_a_budget(client, ada, settings):
    import datetime

    from agent.models import UsageDay

    conversation = Conversation.objects.create(owner=ada, model="m")
    assert 'id="budget"' not in client.get(f"/c/{conversation.id}/").content.decode()
    settings.HARNESS_MONTHLY_BUDGET_USD = 20
    UsageDay.objects.create(user=ada, date=datetime.datetime.now(datetime.UTC).date(), cost_usd=3.5)
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert "This month: $3.50 of $20.00" in page


def test_the_sidebar_search_finds_own_messages_escaped_with_the_match_marked(client, ada):
    from agent.runs import search

    mine = Conversation.objects.create(owner=ada, model="m", title="Ops notes")
    theirs = Conversation.objects.create(owner=User.objects.create(username="zed"), model="m")
    search.index(mine.id, [{"type": "user", "seq": 3, "content": "<b>rotate</b> the keys"}])
    search.index(theirs.id, [{"type": "user", "seq": 1, "content": "rotate their keys"}])
    page = client.get(f"/c/{mine.id}/").content.decode()
    assert 'id="search"' in page and 'id="search-results"' in page
    found = client.get("/search", {"q": "rotate"}, HTTP_HX_REQUEST="true").content.decode()
    assert f'href="/c/{mine.id}/#seq-3"' in found and str(theirs.id) not in found
    assert "&lt;b&gt;<mark>rotate</mark>&lt;/b&gt; the keys" in found  # escaped, then marked
    assert "Ops notes" in found
    none = client.get("/search", {"q": "giraffe"}, HTTP_HX_REQUEST="true").content.decode()
    assert "Nothing found for “giraffe”" in none
    full = client.get("/search", {"q": "keys"}).content.decode()  # without script: a page
    assert "<h1>Search</h1>" in full and f"/c/{mine.id}/#seq-3" in full


def test_actions_need_post_and_csrf(ada):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(ada)
    conversation = Conversation.objects.create(owner=ada, model="m")
    assert strict.post(f"/c/{conversation.id}/delete").status_code == 403
    assert strict.get(f"/c/{conversation.id}/delete").status_code == 405


def test_new_conversation_is_created_by_post(client, ada):
    response = client.post("/c/new/")
    assert response.status_code == 302
    assert Conversation.objects.filter(owner=ada).count() == 1


def test_every_page_has_a_strict_content_security_policy(client, ada):
    conversation = Conversation.objects.create(owner=ada, model="m")
    for url in ("/accounts/login/", f"/c/{conversation.id}/"):
        csp = client.get(url)["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "img-src 'self' data:" in csp and "connect-src 'self'" in csp


def test_event_seq_is_unique_per_conversation_in_the_database(ada):
    from django.db import IntegrityError, transaction

    conversation = Conversation.objects.create(owner=ada, model="m")
    Event.objects.create(conversation=conversation, seq=1, type="user", payload={})
    with pytest.raises(IntegrityError), transaction.atomic():
        Event.objects.create(conversation=conversation, seq=1, type="text", payload={})
    other = Conversation.objects.create(owner=ada, model="m")
    Event.objects.create(conversation=other, seq=1, type="user", payload={})


def test_page_load_queries_do_not_grow_with_the_transcript(client, django_assert_max_num_queries):

    user = User.objects.create_user("quentin", password="pw-quentin-123")
    client.force_login(user)

    def conversation_with(events: int) -> Conversation:
        conversation = Conversation.objects.create(owner=user, model="m", last_seq=events)
        Event.objects.bulk_create(
            Event(conversation=conversation, seq=seq, type="text",
                  payload={"type": "text", "seq": seq, "timestamp": 1, "content": f"part {seq}"})
            for seq in range(1, events + 1)
        )  # fmt: skip
        return conversation

    small, large = conversation_with(5), conversation_with(2000)
    with django_assert_max_num_queries(12) as small_queries:
        assert client.get(f"/c/{small.id}/").status_code == 200
    with django_assert_max_num_queries(len(small_queries.captured_queries)):
        page = client.get(f"/c/{large.id}/").content.decode()
    assert page.count('data-part="text"') == PAGE  # the latest; earlier ones on scroll


@pytest.mark.django_db(transaction=True)
def test_a_running_conversation_is_deleted_after_its_run_has_written_its_last_events(client, ada):
    """Deleting mid-run cancels the run; its last events (the cancelled status) are written
    as it stops, and must land before the conversation goes (seen as a 500 on delete)."""
    import threading
    import time

    from django.db import close_old_connections

    conversation = Conversation.objects.create(owner=ada, model="m",
                                               state=Conversation.State.RUNNING)  # fmt: skip
    failures: list[BaseException] = []

    def run_stopping():  # what a cancelled run does, a moment after the cancel
        try:
            time.sleep(0.3)
            Event.objects.create(conversation_id=conversation.id, seq=1, type="status",
                                 payload={"type": "status", "state": "idle"})  # fmt: skip
            Conversation.objects.filter(pk=conversation.id).update(state="idle")
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            close_old_connections()

    writer = threading.Thread(target=run_stopping)
    writer.start()
    assert client.post(f"/c/{conversation.id}/delete").status_code == 302
    writer.join(10)
    assert failures == []
    assert not Conversation.objects.filter(id=conversation.id).exists()
    assert not Event.objects.filter(conversation_id=conversation.id).exists()


def test_a_background_commands_card_offers_its_ports_preview_and_nothing_else(client, ada):
    conversation = Conversation.objects.create(owner=ada, model="claude-haiku-4-5", title="t")
    good = f"/preview/{conversation.id}/8000/"
    ports = [{"port": 8000, "preview": good},
             {"port": 8001, "preview": "javascript:alert(1)//8001/"},
             {"port": 8002, "preview": f"/preview/{conversation.id}/9999/"},
             {"port": True, "preview": good}]  # fmt: skip
    add_events(
        conversation,
        {"type": "tool_call", "id": "toolu_1", "name": "bash",
         "input": {"command": "python3 -m http.server", "background": True}},
        {"type": "tool_result", "id": "toolu_1", "isError": False,
         "display": {"kind": "bash", "exit_code": None, "background": True},
         "result": json.dumps({"job": 1, "output": "Serving\n", "ports": ports})},
    )  # fmt: skip
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert page.count('class="tool-port"') == 1
    assert 'data-port="8000"' in page and f'href="{good}"' in page
    assert "javascript:" not in page
    # (by attribute: a random token of the page may hold these digits)
    assert 'data-port="8001"' not in page and 'data-port="8002"' not in page
    assert "/9999/" not in page


@pytest.mark.parametrize(("state", "said"), [
    ({"running": True, "ports": []}, "Started in the background as job 3; nothing listened on a "
                                     "port when the call returned"),
    ({"running": False, "exit_code": 0}, "Job 3 ran in the background and exited before the "
                                         "call returned (status 0)."),
])  # fmt: skip
def test_a_background_commands_card_says_what_became_of_its_job(client, ada, state, said):
    """Not an empty "ok": a job that listens on nothing, or ended at once, says so."""
    conversation = Conversation.objects.create(owner=ada, model="claude-haiku-4-5", title="t")
    add_events(
        conversation,
        {"type": "tool_call", "id": "toolu_1", "name": "bash",
         "input": {"command": "sleep 100", "background": True}},
        {"type": "tool_result", "id": "toolu_1", "isError": False,
         "display": {"kind": "bash", "exit_code": state.get("exit_code"), "background": True},
         "result": json.dumps({"job": 3, "output": "", **state})},
    )  # fmt: skip
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert said in " ".join(page.split())
    assert 'class="tool-port"' not in page
