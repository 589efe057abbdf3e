"""The admin: transcripts, searchable events, filters, exports; staff only."""

from __future__ import annotations

import io
import json
import re
import zipfile

import pytest

from agent.models import Conversation, Event, User

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(client):
    admin_user = User.objects.create_superuser("root", password="pw-root-123")
    client.force_login(admin_user)
    return admin_user


@pytest.fixture
def chat():
    owner = User.objects.create_user("carol", password="pw-carol-123")
    owner.prompt_history = ["list files", "read a.txt"]
    owner.save()
    conversation = Conversation.objects.create(owner=owner, model="claude-haiku-4-5",
                                               title="Carol's bug hunt")  # fmt: skip
    payloads = [
        {"type": "user", "content": "find the needle-in-haystack bug"},
        {"type": "text", "content": "Looking with **grep**."},
        {"type": "tool_call", "id": "t1", "name": "grep",
         "input": {"pattern": "needle", "path": "."}},
        {"type": "tool_result", "id": "t1", "result": json.dumps({"matches": "a.py:3:needle"}),
         "isError": False},
        {"type": "usage", "input_tokens": 900, "output_tokens": 40, "cost_usd": 0.0031},
        {"type": "status", "state": "idle"},
    ]  # fmt: skip
    for seq, payload in enumerate(payloads, 1):
        Event.objects.create(
            conversation=conversation,
            seq=seq,
            type=payload["type"],
            payload={**payload, "seq": seq, "timestamp": 1_700_000_000_000},
        )
    return conversation


def test_conversation_change_page_shows_the_full_transcript(client, staff, chat):
    page = client.get(f"/admin/agent/conversation/{chat.id}/change/").content.decode()
    assert "needle-in-haystack" in page and "<strong>grep</strong>" in page
    assert 'data-tool-name="grep"' in page and "a.py:3:needle" in page
    # What the answer used, on its last text part (the admin shows no other control).
    assert re.search(r'class="part text answer-end".*?940 tokens · \$0\.0031', page, re.S)


def test_an_admins_edit_leaves_the_conversations_place_among_the_recently_active(
    client, staff, chat
):
    before = Conversation.objects.get(pk=chat.pk).updated
    form = {"title": "edited by staff", "instructions": "",
            "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0",
            "memberships-MIN_NUM_FORMS": "0", "memberships-MAX_NUM_FORMS": "1000"}  # fmt: skip
    response = client.post(f"/admin/agent/conversation/{chat.id}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    edited = Conversation.objects.get(pk=chat.pk)
    assert edited.title == "edited by staff" and edited.updated == before


def test_conversation_list_filters_and_shows_totals(client, staff, chat):
    page = client.get("/admin/agent/conversation/?state__exact=idle").content.decode()
    assert "Carol&#x27;s bug hunt" in page and "carol" in page
    page = client.get("/admin/agent/conversation/?state__exact=running").content.decode()
    assert "Carol&#x27;s bug hunt" not in page


def test_events_are_searchable_by_text(client, staff, chat):
    page = client.get("/admin/agent/event/?q=needle-in-haystack").content.decode()
    assert "1 event" in page or "1 result" in page
    page = client.get("/admin/agent/event/?q=nothing-matches-this").content.decode()
    assert "0 events" in page or "0 results" in page


def test_user_page_shows_prompt_history(client, staff, chat):
    chat.owner.prompt_history.append("<script>alert(1)</script>")
    chat.owner.save(update_fields=["prompt_history"])
    page = client.get(f"/admin/agent/user/{chat.owner.id}/change/").content.decode()
    assert '<ol class="prompt-history">' in page
    assert "<li><pre>list files</pre></li>" in page and "read a.txt" in page
    assert "<pre>&lt;script&gt;alert(1)&lt;/script&gt;</pre>" in page


def test_an_events_page_shows_its_payload_escaped(client, staff, chat):
    event = chat.events.get(seq=1)
    event.payload = {**event.payload, "content": "<img src=x onerror=alert(1)>"}
    event.save(update_fields=["payload"])
    page = client.get(f"/admin/agent/event/{event.pk}/change/").content.decode()
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "<img src=x" not in page
    assert "<pre>{" in page  # the payload, as indented JSON


def test_export_one_conversation_as_markdown_and_json(client, staff, chat):
    url = "/admin/agent/conversation/"
    response = client.post(url, {"action": "export_markdown", "_selected_action": [chat.id]})
    body = response.content.decode()
    assert response["Content-Type"].startswith("text/markdown")
    assert body.startswith("# Carol's bug hunt") and "## User" in body and "grep" in body
    response = client.post(url, {"action": "export_json", "_selected_action": [chat.id]})
    data = json.loads(response.content)
    assert data["id"] == str(chat.id) and [e["seq"] for e in data["events"]] == [1, 2, 3, 4, 5, 6]


def test_export_several_conversations_as_a_zip(client, staff, chat):
    other = Conversation.objects.create(owner=chat.owner, model="m", title="second")
    response = client.post("/admin/agent/conversation/", {
        "action": "export_json", "_selected_action": [chat.id, other.id]})  # fmt: skip
    names = zipfile.ZipFile(io.BytesIO(response.content)).namelist()
    assert sorted(names) == sorted(f"conversation-{c.id}.json" for c in (chat, other))


def test_non_staff_users_cannot_use_the_admin(client, chat):
    client.force_login(chat.owner)
    response = client.get(f"/admin/agent/conversation/{chat.id}/change/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_event_log_is_read_only_in_the_admin(client, staff, chat):
    event = chat.events.first()
    response = client.post(f"/admin/agent/event/{event.id}/change/", {"type": "hacked"})
    event.refresh_from_db()
    assert event.type == "user" and response.status_code in (302, 403)


def test_admin_creates_a_token_shown_once_and_stored_hashed(client, staff, chat):
    from agent.models import ApiToken
    from agent.web.api_tokens import digest, user_for_token

    response = client.post("/admin/agent/apitoken/add/", {"user": chat.owner.id, "name": "laptop"},
                           follow=True)  # fmt: skip
    page = response.content.decode()
    token = page.split("New API token for carol: ")[1].split(" ")[0]
    assert token.startswith("hrn_")
    record = ApiToken.objects.get(name="laptop")
    assert record.key_hash == digest(token) and token not in str(record.__dict__)
    assert user_for_token(f"Bearer {token}") == chat.owner
    listing = client.get("/admin/agent/apitoken/").content.decode()
    assert token not in listing and record.prefix in listing


def test_admin_revokes_tokens(client, staff, chat):
    from agent.web.api_tokens import create_token, user_for_token

    record, token = create_token(chat.owner, "old")
    client.post("/admin/agent/apitoken/", {"action": "revoke_tokens",
                                           "_selected_action": [record.id]})  # fmt: skip
    record.refresh_from_db()
    assert record.revoked is not None and user_for_token(f"Bearer {token}") is None


def test_staff_edit_the_one_row_of_deployment_instructions(client, staff):
    from agent.models import DeploymentInstructions

    assert DeploymentInstructions.current() == ""
    add = "/admin/agent/deploymentinstructions/add/"
    assert client.post(add, {"text": "Never push to main."}).status_code == 302
    assert DeploymentInstructions.current() == "Never push to main."
    assert client.get(add).status_code == 403  # one row: edited, not added again
    change = "/admin/agent/deploymentinstructions/1/change/"
    assert client.post(change, {"text": "Use tabs."}).status_code == 302
    assert DeploymentInstructions.objects.get().text == "Use tabs."
    assert client.get("/admin/agent/deploymentinstructions/1/delete/").status_code == 403


def test_staff_set_a_users_budget_and_read_the_daily_usage(client, staff):
    import datetime

    from agent.models import UsageDay

    user = User.objects.create_user("payer", password="pw-payer-123")
    UsageDay.objects.create(user=user, date=datetime.datetime.now(datetime.UTC).date(), cost_usd=2)
    page = client.get(f"/admin/agent/user/{user.pk}/change/").content.decode()
    assert 'name="monthly_budget_usd"' in page and "$2.00" in page
    listing = client.get("/admin/agent/usageday/").content.decode()
    assert "payer" in listing
    assert client.get("/admin/agent/usageday/add/").status_code == 403


def _staff_with(client, *codenames: str) -> User:
    from django.contrib.auth.models import Permission

    clerk = User.objects.create_user("clerk", password="pw-clerk-123", is_staff=True)
    clerk.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(clerk)
    return clerk


def _mint(client, user: User):
    from agent.models import ApiToken

    before = ApiToken.objects.filter(user=user).count()
    response = client.post("/admin/agent/apitoken/add/", {"user": user.pk, "name": "x"})
    return response, ApiToken.objects.filter(user=user).count() - before


def test_staff_who_may_only_add_tokens_mint_none_for_others(client, chat):
    clerk = _staff_with(client, "add_apitoken", "view_apitoken")
    root = User.objects.create_superuser("root", password="pw-root-123")
    form = client.get("/admin/agent/apitoken/add/").content.decode()
    assert f'value="{root.pk}"' not in form and f'value="{chat.owner.pk}"' not in form
    for target in (root, chat.owner):  # the attack: a token acting as the superuser
        response, made = _mint(client, target)
        assert made == 0 and response.status_code == 200  # the form, refusing the choice
        assert "New API token" not in response.content.decode()
    assert _mint(client, clerk)[1] == 1  # their own: yes


def test_changing_users_allows_tokens_for_users_but_never_for_a_superuser(client, chat):
    _staff_with(client, "add_apitoken", "change_user")
    root = User.objects.create_superuser("root", password="pw-root-123")
    assert _mint(client, root)[1] == 0
    assert _mint(client, chat.owner)[1] == 1


def test_a_superuser_mints_for_a_superuser(client, staff):
    other = User.objects.create_superuser("root2", password="pw-root-123")
    assert _mint(client, other)[1] == 1


def test_the_rule_for_acting_as_another_account():
    from django.contrib.auth.models import Permission

    from agent.access import actable_by, may_act_as

    root = User.objects.create_superuser("root", password="pw-root-123")
    carol = User.objects.create_user("carol", password="pw-carol-123")
    clerk = User.objects.create_user("clerk", password="pw-clerk-123", is_staff=True)
    assert may_act_as(clerk, clerk) and not may_act_as(clerk, carol)
    assert not may_act_as(clerk, root) and list(actable_by(clerk)) == [clerk]
    clerk.user_permissions.add(Permission.objects.get(codename="change_user"))
    clerk = User.objects.get(pk=clerk.pk)
    assert may_act_as(clerk, carol) and not may_act_as(clerk, root)
    assert set(actable_by(clerk)) == {carol, clerk}
    assert may_act_as(root, carol) and may_act_as(root, root) and not may_act_as(carol, root)
    root.is_active = False
    assert not may_act_as(root, User.objects.create_superuser("r2", password="pw-root-123"))
