"""The monthly budget checked where it is spent (agent/runs/spend.py), as attacked: a prompt
under the budget whose run goes on spending past it. Follow-ups queued before the budget
was spent are refused when delivered, without a model call; a CLI agent's prompt that makes
call after call through the gateway is refused (403, naming the budget) once it is spent.
Through the run manager, the real writer and database, and the test model server; only the
CLI itself (tmux, the sandbox) is played by the test."""

from __future__ import annotations

import asyncio
import datetime
import json
import threading
from decimal import Decimal

import aiohttp
import pytest
from asgiref.sync import sync_to_async

from agent.core.events import UsageEvent
from agent.core.loop import CallRefused
from agent.models import Conversation, Event, UsageDay, User
from agent.runs import cli_run, llm_gateway, usage
from agent.runs.claim import RunRefused, check_queueing
from agent.runs.llm_gateway import PREFIX, open_gateway
from agent.runs.manager import RunManager
from agent.runs.spend import SpendGuard
from testkit.model_server import text_reply

pytestmark = pytest.mark.django_db(transaction=True)

CALL = Decimal("0.00011")  # what one answer of the test model costs (10 tokens in, 20 out)


@pytest.fixture
def paid(settings, model_server, tmp_path):
    settings.ANTHROPIC_API_KEY = "test-key"
    settings.ANTHROPIC_BASE_URL = model_server.url
    settings.HARNESS_WORKSPACES = tmp_path / "workspaces"
    settings.HARNESS_BASH = "off"
    settings.HARNESS_RUNS_PER_MINUTE = 100
    model_server.fallback = lambda body: text_reply("answered")
    return model_server


def conversation_of_penny(agent: str = "harness") -> Conversation:
    """A conversation of a new user's, whose budget is the deployment's (a user's own has
    whole cents only: the test model's answers cost a hundredth of one)."""
    owner = User.objects.create_user("penny", password="pw-penny-1234")
    return Conversation.objects.create(owner=owner, model="claude-haiku-4-5", agent=agent)


async def until(condition, seconds: float = 10.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.01)


def stored(conversation) -> list[dict]:
    rows = Event.objects.filter(conversation=conversation).order_by("seq")
    return list(rows.values_list("payload", flat=True))


async def test_follow_ups_queued_under_the_budget_are_refused_once_it_is_spent(paid, settings):
    settings.HARNESS_MONTHLY_BUDGET_USD = CALL - Decimal("0.00001")  # one answer spends it
    conversation = await sync_to_async(conversation_of_penny)()
    cid, owner_id = conversation.id, conversation.owner_id
    release = threading.Event()  # the first answer waits while the follow-ups are queued
    paid.fallback = lambda body: release.wait(10) and text_reply("answered")
    manager = RunManager()
    assert await manager.submit(cid, owner_id, "first", "follow_up") is None  # started
    await until(lambda: paid.requests)
    queued = [await manager.submit(cid, owner_id, f"more {n}", "follow_up") for n in range(3)]
    assert all(queued)  # nothing was spent yet: queued
    release.set()
    await manager.wait(cid)
    assert len(paid.requests) == 1  # the follow-up delivered was never sent to the model
    events = await sync_to_async(stored)(conversation)
    error = [e for e in events if e["type"] == "error"][-1]
    assert error["code"] == "budget_exceeded" and "renews on the 1st" in error["message"]
    assert events[-1]["type"] == "status" and events[-1]["state"] == "error"
    dropped = [e["id"] for e in events if e["type"] == "unqueued" and e["reason"] == "not_sent"]
    assert dropped == queued[1:]
    with pytest.raises(RunRefused) as refused:  # and the next prompt is told the same
        await manager.submit(cid, owner_id, "again", "follow_up")
    assert (refused.value.code, refused.value.message) == ("budget_exceeded", error["message"])


def test_a_prompt_queued_past_the_budget_is_refused_as_a_new_one_would_be(paid, settings):
    settings.HARNESS_MONTHLY_BUDGET_USD = CALL
    conversation = conversation_of_penny()
    Conversation.objects.filter(pk=conversation.pk).update(state="running")
    UsageDay.objects.create(user_id=conversation.owner_id, date=datetime.date.today(),
                            cost_usd=CALL)  # fmt: skip
    with pytest.raises(RunRefused) as refused:
        check_queueing.func(conversation.id, conversation.owner_id)
    assert refused.value.code == "budget_exceeded"


async def test_a_runs_spend_counts_before_it_is_stored_and_once_after(settings):
    settings.HARNESS_MONTHLY_BUDGET_USD = 2 * CALL + CALL / 2
    conversation = await sync_to_async(conversation_of_penny)()
    guard = SpendGuard(conversation.owner_id)
    answers = [UsageEvent(input_tokens=10, output_tokens=20, cost_usd=float(CALL))] * 3
    await guard()  # nothing spent
    for answer in answers[:2]:
        guard.spent(answer)
    await guard()  # 2 of 2.5 calls' worth, none stored yet
    async with guard.storing(answers[:1]):  # as the run's writer stores a batch
        await sync_to_async(usage.add)(conversation.owner_id, [answers[0].to_dict()])
    await guard()  # one stored, one not: still two, not three
    guard.spent(answers[2])
    with pytest.raises(CallRefused) as refused:
        await guard()
    assert refused.value.code == "budget_exceeded"


# -- a CLI agent: its prompt calls the model through the gateway, many times ----------------
class FakeCli:
    """The CLI in its session: on a prompt it calls the model through the gateway's socket
    ``calls`` times, whatever the answers (a runaway agent), then ends its turn."""

    def __init__(self, gateway, calls: int):
        self.gateway, self.calls = gateway, calls
        self.answers: list[tuple[int, dict | None]] = []
        self.last_used = 0.0

    async def send(self, text: str) -> None:
        pass

    async def capture(self, escapes: bool = True) -> str:
        return ""

    async def lines(self):
        socket = f"{self.gateway._directory}/s"
        body = json.dumps({"model": "claude-haiku-4-5", "max_tokens": 50, "stream": True,
                           "messages": [{"role": "user", "content": "go on"}]})  # fmt: skip
        headers = {"x-api-key": "harness-sandbox", "anthropic-version": "2023-06-01"}
        for _ in range(self.calls):
            async with (
                aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=socket)) as client,
                client.post(f"http://gw{PREFIX}/v1/messages", data=body, headers=headers) as r,
            ):
                data = await r.read()
                self.answers.append((r.status, json.loads(data) if r.status != 200 else None))
            yield "called"
        yield "done"


class FakeParser:
    failed = None
    finished = False

    def feed(self, line: str) -> list:
        self.finished = line == "done"
        return []


class FakeProvider:
    def parser(self) -> FakeParser:
        return FakeParser()

    def prompt_input(self, content: str) -> str:
        return content

    def session_marker(self, parser) -> None:
        return None


class FakeEntry:
    def __init__(self, gateway, calls: int):
        self.gateway, self.session, self.provider = gateway, FakeCli(gateway, calls), FakeProvider()


async def test_a_cli_prompt_is_refused_model_calls_once_its_owners_budget_is_spent(
    paid, settings, monkeypatch
):
    settings.HARNESS_MONTHLY_BUDGET_USD = 2 * CALL
    conversation = await sync_to_async(conversation_of_penny)(agent="pi")
    gateway = await open_gateway(str(conversation.id), conversation.owner_id)
    entry = FakeEntry(gateway, calls=6)

    async def session_for(*args, **kwargs):
        return entry

    monkeypatch.setattr(cli_run.sessions, "session_for", session_for)
    monkeypatch.setattr(cli_run.sessions, "remember", lambda *args: None)
    manager = RunManager()
    try:
        await manager.start(conversation.id, conversation.owner_id, "do everything")
        await manager.wait(conversation.id)
    finally:
        await gateway.close()
        await llm_gateway.close_upstream()
    assert [status for status, _ in entry.session.answers] == [200, 200, 403, 403, 403, 403]
    error = entry.session.answers[-1][1]["error"]
    assert error["type"] == "permission_error" and "budget of $0.00 is spent" in error["message"]
    assert len(paid.requests) == 2  # the refused calls never went upstream
    spent = await sync_to_async(usage.month_to_date)(conversation.owner_id)
    assert spent == 2 * CALL
