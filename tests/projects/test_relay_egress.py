"""The git relay held to the owner's egress rules, log and daily bound: an admin's Egress
rule for the owner admits a git server on loopback (another user's rule admits nothing),
each clone or push is one Egress log row with its bytes, charged to the owner's day and
counted in /metrics, and a spent day refuses the next operation before anything is
connected (or cuts one that runs it out)."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from agent.core.egress_rules import EgressRefused
from agent.egress import ledger
from agent.models import Conversation, EgressDay, EgressLog, EgressRule, User
from agent.runs import git_credentials, git_remote
from agent.runs.git_credentials import Credential
from agent.runs.git_relay import GitRelay
from agent.server import metrics
from tests.projects.conftest import TOKEN
from tests.projects.test_clone_push import _cloned, _commit_in, _repository
from tests.projects.test_git_relay import _get

pytestmark = pytest.mark.django_db(transaction=True)


def _counts() -> dict:
    return {"allowed": metrics.EGRESS_CONNECTIONS.values["allowed"],
            "refused": metrics.EGRESS_CONNECTIONS.values["refused"],
            "up": metrics.EGRESS_BYTES.values["up"],
            "down": metrics.EGRESS_BYTES.values["down"]}  # fmt: skip


async def _owner(remote) -> User:
    ada = await User.objects.acreate(username="ada")
    await sync_to_async(git_credentials.store)(ada, remote.host, "ada-git", TOKEN)
    return ada


async def _rows() -> list[EgressLog]:
    return [row async for row in EgressLog.objects.order_by("id")]


async def _spend_day(user, leave: int = 0) -> None:
    """The user's sandboxes have moved all but ``leave`` bytes of today's bound."""
    await EgressDay.objects.aupdate_or_create(
        user=user, date=ledger.today(), defaults={"bytes": ledger.bound_bytes() - leave}
    )


async def test_an_admins_rule_for_the_owner_admits_a_loopback_remote_and_no_one_else(
    settings, remote
):
    settings.HARNESS_EGRESS_ALLOW = []
    ada, bob = await _owner(remote), await User.objects.acreate(username="bob")
    await EgressRule.objects.acreate(host="127.0.0.1", ports=str(remote.port), user=ada)
    url, credential = remote.url("demo.git"), Credential("ada-git", TOKEN)
    with pytest.raises(EgressRefused) as refused:
        await GitRelay(bob.id, url, credential).open()
    assert "loopback" in str(refused.value) and "Egress rule" in str(refused.value)
    assert remote.requests == []
    async with GitRelay(ada.id, url, credential) as relay:
        assert relay.host == "127.0.0.1"
        status, body = await _get(relay, "/git/info/refs?service=git-upload-pack")
    assert status == 200 and b"refs/heads/main" in body
    refusal, admitted = await _rows()
    assert (refusal.user_id, refusal.allowed, refusal.host, refusal.port) == (
        bob.id, False, "127.0.0.1", remote.port)  # fmt: skip
    assert "loopback" in refusal.reason and refusal.bytes_up == refusal.bytes_down == 0
    assert (admitted.user_id, admitted.allowed, admitted.reason) == (ada.id, True, "")
    assert admitted.bytes_down == len(body)


async def test_a_clone_and_a_push_are_each_one_log_row_charged_to_the_owners_day(net, remote):
    before = _counts()
    ada = await _owner(remote)
    project = await _cloned(ada, remote)
    assert project.state == "ready", project.error
    (clone,) = await _rows()
    assert (clone.user_id, clone.conversation_id, clone.host, clone.port, clone.allowed,
            clone.reason) == (ada.id, None, "127.0.0.1", remote.port, True, "")  # fmt: skip
    assert clone.bytes_up > 0 and clone.bytes_down > 0
    day = await EgressDay.objects.aget(user=ada, date=ledger.today())
    assert day.bytes == clone.bytes_up + clone.bytes_down
    conversation = await Conversation.objects.acreate(owner=ada, model="m")
    uid = net.HARNESS_SANDBOX_UID_BASE + ada.pk
    main = remote.head_of("demo.git", "main")
    _commit_in(_repository(project), "harness/c0ffee00", main, "n.txt", "n\n", uid)
    await git_remote.push(project, "harness/c0ffee00", conversation.id)
    _, push = await _rows()
    assert (push.conversation_id, push.allowed) == (conversation.id, True)
    assert push.bytes_up > 0 and push.bytes_down > 0
    await day.arefresh_from_db()
    assert day.bytes == sum(r.bytes_up + r.bytes_down for r in (clone, push))
    after = _counts()
    assert after["allowed"] - before["allowed"] == 2 and after["refused"] == before["refused"]
    assert after["up"] - before["up"] == clone.bytes_up + push.bytes_up
    assert after["down"] - before["down"] == clone.bytes_down + push.bytes_down


async def test_a_spent_day_refuses_the_clone_before_connecting_and_logs_it(net, remote):
    net.HARNESS_EGRESS_MB_PER_DAY = 1
    before = _counts()
    ada = await _owner(remote)
    await _spend_day(ada)
    project = await _cloned(ada, remote)
    assert project.state == "failed"
    assert "daily egress bound (1 MiB a day, HARNESS_EGRESS_MB_PER_DAY; UTC) is used up" in (
        project.error)  # fmt: skip
    assert remote.requests == []
    (row,) = await _rows()
    assert (row.user_id, row.allowed, row.bytes_up, row.bytes_down) == (ada.id, False, 0, 0)
    assert "HARNESS_EGRESS_MB_PER_DAY" in row.reason
    assert _counts()["refused"] - before["refused"] == 1


async def test_a_push_past_the_days_bound_is_refused_and_a_clone_running_it_out_is_cut(net, remote):
    net.HARNESS_EGRESS_MB_PER_DAY = 1
    ada = await _owner(remote)
    project = await _cloned(ada, remote)
    await _spend_day(ada)
    with pytest.raises(git_remote.GitFailed) as failed:
        await git_remote.push(project, "main")
    assert "HARNESS_EGRESS_MB_PER_DAY" in failed.value.message and not failed.value.rejected
    await _spend_day(ada, leave=100)  # less than the ref advertisement alone
    again = await _cloned(ada, remote)
    assert again.state == "failed"
    assert "stopped: the daily egress bound (1 MiB a day" in again.error, again.error
    _, refusal, cut = await _rows()
    assert not refusal.allowed and "HARNESS_EGRESS_MB_PER_DAY" in refusal.reason
    assert cut.allowed and cut.reason.startswith("stopped: the daily egress bound")
    assert cut.bytes_down > 100
    assert await sync_to_async(ledger.used_today)(ada.id) >= ledger.bound_bytes()
