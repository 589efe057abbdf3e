"""The audit log (issue 15): sign-ins and their failures, sign-outs, API tokens made and
revoked, shares and budget changes, each with who and from where, through the real views,
commands and admin; nothing secret in it; the admin lists it and changes nothing."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.test import Client

from agent.models import ApiToken, AuditEntry, Conversation, User

pytestmark = pytest.mark.django_db

PASSWORD = "pw-olga-secret-1234"


@pytest.fixture
def olga():
    return User.objects.create_user("olga", password=PASSWORD)


@pytest.fixture
def staff():
    root = User.objects.create_superuser("root", password="pw-root-1234")
    client = Client(REMOTE_ADDR="10.0.0.9")
    client.force_login(root)
    return root, client


def entries(action: str) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action=action).order_by("time", "pk"))


def no_secret_anywhere(*secrets: str) -> None:
    stored = json.dumps(list(AuditEntry.objects.values()), default=str)
    for secret in secrets:
        assert secret not in stored


def test_sign_in_its_failure_and_sign_out_are_recorded_with_the_address(olga, settings):
    client = Client(REMOTE_ADDR="192.0.2.7")
    client.post("/accounts/login/", {"username": "olga", "password": "wrong-guess-999"})
    client.post("/accounts/login/", {"username": "olga", "password": PASSWORD})
    client.post("/accounts/logout/")
    [failed] = entries("sign_in_failed")
    assert (failed.target, failed.actor, failed.ip) == ("olga", None, "192.0.2.7")
    [signed_in] = entries("sign_in")
    assert (signed_in.actor, signed_in.actor_name, signed_in.ip) == (olga, "olga", "192.0.2.7")
    [signed_out] = entries("sign_out")
    assert signed_out.actor == olga
    no_secret_anywhere(PASSWORD, "wrong-guess-999")


def test_a_lockout_is_recorded(olga, settings):
    client = Client(REMOTE_ADDR="192.0.2.8")
    for _ in range(settings.AXES_FAILURE_LIMIT + 1):
        client.post("/accounts/login/", {"username": "olga", "password": "nope-nope-123"})
    assert [e.target for e in entries("locked_out")][:1] == ["olga"]


def test_tokens_made_by_the_command_and_revoked_in_the_admin_are_recorded(olga, staff, capsys):
    call_command("create_api_token", "olga", "--name", "laptop")
    token = capsys.readouterr().out.strip()
    [created] = entries("token_created")
    record = ApiToken.objects.get(user=olga)
    assert created.actor is None and created.target == f"{record.prefix}… of olga"
    assert created.details == {"name": "laptop"}
    root, client = staff
    client.post("/admin/agent/apitoken/", {"action": "revoke_tokens",
                                           "_selected_action": [record.pk]})  # fmt: skip
    [revoked] = entries("token_revoked")
    assert (revoked.actor, revoked.ip, revoked.target) == (root, "10.0.0.9", created.target)
    no_secret_anywhere(token, record.key_hash)


def test_a_line_written_after_a_request_is_not_put_on_that_requests_user(olga, staff):
    # The test client serves in this thread, as a WSGI worker would: the request it served
    # must not stay behind as "the request being served" for what this thread writes next.
    root, client = staff
    assert client.get("/admin/").status_code == 200
    call_command("create_api_token", "olga", "--name", "later")
    [created] = entries("token_created")
    assert created.actor is None and created.ip is None


def test_a_token_made_in_the_admin_is_recorded_with_its_maker(olga, staff):
    root, client = staff
    client.post("/admin/agent/apitoken/add/", {"user": olga.pk, "name": "ci"})
    [created] = entries("token_created")
    assert created.actor == root and created.target.endswith("… of olga")


def test_shares_are_recorded_as_the_owner_made_them(olga):
    User.objects.create_user("cole", password="pw-cole-12345")
    conversation = Conversation.objects.create(owner=olga, model="claude-haiku-4-5")
    client = Client(REMOTE_ADDR="192.0.2.9")
    client.force_login(olga)
    url = f"/c/{conversation.id}/share"
    client.post(url, {"do": "add", "username": "cole", "role": "viewer"})
    client.post(url, {"do": "add", "username": "cole", "role": "collaborator"})
    client.post(url, {"do": "add", "username": "cole", "role": "collaborator"})  # no change
    client.post(url, {"do": "remove", "username": "cole"})
    client.post(url, {"do": "remove", "username": "cole"})  # not a member: nothing
    client.post(url, {"do": "team", "team": "on"})
    client.post(url, {"do": "team"})
    client.post(url, {"do": "add", "username": "nobody-here", "role": "viewer"})  # refused
    log = list(AuditEntry.objects.order_by("time", "pk").exclude(action="sign_in"))
    assert [(e.action, e.details) for e in log] == [
        ("member_added", {"role": "viewer"}),
        ("member_changed", {"before": "viewer", "after": "collaborator"}),
        ("member_removed", {}),
        ("team_opened", {}),
        ("team_closed", {}),
    ]
    assert {(e.actor, e.ip) for e in log} == {(olga, "192.0.2.9")}
    assert log[0].target == f"conversation {conversation.id} with cole"


def test_a_budget_change_in_the_admin_is_recorded_with_before_and_after(olga, staff):
    root, client = staff
    form = client.get(f"/admin/agent/user/{olga.pk}/change/")
    assert form.status_code == 200
    data = {"username": "olga", "monthly_budget_usd": "12.50", "bash_enabled": "on",
            "theme": "system", "date_joined_0": "2026-11-01", "date_joined_1": "10:00:00",
            "is_active": "on"}  # fmt: skip
    response = client.post(f"/admin/agent/user/{olga.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    olga.refresh_from_db()
    assert olga.monthly_budget_usd == Decimal("12.50")
    [changed] = entries("budget_changed")
    assert (changed.actor, changed.target, changed.details) == (
        root, "olga", {"before": None, "after": "12.50"})  # fmt: skip
    client.post(f"/admin/agent/user/{olga.pk}/change/", data)  # the same again: no line
    assert len(entries("budget_changed")) == 1


def test_the_admin_lists_the_log_and_changes_nothing(olga, staff):
    root, client = staff
    bad = {"username": "olga", "password": "bad-123456"}
    Client(REMOTE_ADDR="192.0.2.1").post("/accounts/login/", bad)
    entry = AuditEntry.objects.get(action="sign_in_failed")
    listing = client.get("/admin/agent/auditentry/?action__exact=sign_in_failed")
    assert listing.status_code == 200 and "192.0.2.1" in listing.content.decode()
    assert client.get("/admin/agent/auditentry/add/").status_code == 403
    assert client.post(f"/admin/agent/auditentry/{entry.pk}/delete/", {"post": "yes"}
                       ).status_code == 403  # fmt: skip
    client.post(f"/admin/agent/auditentry/{entry.pk}/change/", {"target": "forged"})
    entry.refresh_from_db()
    assert entry.target == "olga"
