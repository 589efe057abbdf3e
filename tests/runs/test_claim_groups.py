"""Claims that arrive together are made together (agent/runs/claim.py, agent/server/
grouping.py): one trip to the claims' thread and one transaction for the group, each claim
in a savepoint, so a refusal or a failure stays its own."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from asgiref.sync import sync_to_async
from django.db import OperationalError

from agent.models import Conversation, Event, User
from agent.runs import claim as claims
from agent.runs.claim import RunRefused, Setup
from agent.server import grouping

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def groups(monkeypatch) -> list[int]:
    """The size of each group of claims handled."""
    sizes: list[int] = []
    handle = claims._claim_together

    def counted(requests):
        sizes.append(len(requests))
        return handle(requests)

    monkeypatch.setattr(claims, "_claim_together", counted)
    return sizes


def _conversations(n: int, **fields) -> list[Conversation]:
    owner = User.objects.create_user("ada", password="pw-ada-12345")
    return [Conversation.objects.create(owner=owner, model="m", **fields) for _ in range(n)]


def _sent_together(conversations, prompt="go"):
    async def send():
        return await asyncio.gather(
            *(claims.claim(c.id, c.owner_id, prompt) for c in conversations),
            return_exceptions=True,
        )

    return asyncio.run(send())


def test_claims_sent_together_are_one_group_and_a_refusal_undoes_only_its_own(groups, settings):
    settings.HARNESS_CONCURRENT_RUNS = 10
    *idle, busy = _conversations(6)
    Conversation.objects.filter(id=busy.id).update(state="running")
    results = _sent_together([*idle, busy])
    assert groups == [6]
    assert all(isinstance(result, Setup) for result in results[:5]), results
    assert isinstance(results[5], RunRefused) and results[5].code == "prompt_running"
    states = dict(Conversation.objects.values_list("id", "state"))
    assert [states[c.id] for c in idle] == ["running"] * 5
    assert [Conversation.objects.get(id=c.id).title for c in idle] == ["go"] * 5
    assert Conversation.objects.get(id=busy.id).title == ""  # the refused one: untouched


def test_a_run_started_is_activity_which_orders_the_lists(groups, settings):
    older, newer = _conversations(2)
    assert list(Conversation.objects.values_list("id", flat=True)) == [newer.id, older.id]
    assert isinstance(_sent_together([older])[0], Setup)
    assert list(Conversation.objects.values_list("id", flat=True)) == [older.id, newer.id]


def test_a_refusal_after_the_claims_update_leaves_that_conversation_idle(groups, settings):
    settings.HARNESS_CONCURRENT_RUNS = 2
    conversations = _conversations(3)
    results = _sent_together(conversations)
    assert groups == [3]
    assert [isinstance(r, Setup) for r in results] == [True, True, False]
    assert results[2].code == "quota_concurrent"  # the group's own claims count
    states = [Conversation.objects.get(id=c.id).state for c in conversations]
    assert states == ["running", "running", "idle"]


def test_a_claim_failing_in_the_database_fails_alone_and_the_others_are_made(groups, monkeypatch):
    conversations = _conversations(3)
    broken = conversations[1].id
    claim_one = claims._claim

    def failing(request):
        if request.conversation_id == broken:
            raise OperationalError("disk I/O error")
        return claim_one(request)

    monkeypatch.setattr(claims, "_claim", failing)
    results = _sent_together(conversations)
    assert groups == [3]  # the group failed as a whole, then each claim went alone
    assert isinstance(results[1], OperationalError)
    assert isinstance(results[0], Setup) and isinstance(results[2], Setup)
    states = [Conversation.objects.get(id=c.id).state for c in conversations]
    assert states == ["running", "idle", "running"]


def test_a_workspace_that_cannot_be_made_refuses_its_prompt_and_leaves_it_idle(
    monkeypatch, settings, tmp_path
):
    """The workspace and system prompt are made on the claims' thread after the commit: a
    failure there is the run's start failing (storage_full), and the claim is given back."""
    from agent.runs.manager import runs
    from agent.server.storage import StorageError

    settings.HARNESS_WORKSPACES = tmp_path / "workspaces"
    (conversation,) = _conversations(1)

    def full(owner_id):
        raise StorageError("the workspace's disk is full")

    monkeypatch.setattr(claims, "workspace_for", full)

    async def start() -> str:
        with pytest.raises(RunRefused) as refused:
            await runs.start(conversation.id, conversation.owner_id, "go")
        return refused.value.code

    assert asyncio.run(start()) == "storage_full"
    conversation.refresh_from_db()
    assert (conversation.state, conversation.lease_owner) == ("idle", "")


def _two_owners() -> list[Conversation]:
    found = []
    for name in ("ann", "bob"):
        owner = User.objects.create_user(name, password=f"pw-{name}-12345")
        found.append(Conversation.objects.create(owner=owner, model="m"))
    return found


def _slowed(monkeypatch, seconds: float, only=None) -> None:
    claim_one = claims._claim

    def slow(request):
        if only is None or request.conversation_id == only:
            time.sleep(seconds)
        return claim_one(request)

    monkeypatch.setattr(claims, "_claim", slow)


def test_a_claim_whose_caller_went_away_is_given_back_or_never_made(monkeypatch):
    """A client gone mid-prompt cancels the view: a claim still queued is not made, one
    being made is released, so the conversation is not left running with no run."""
    first, second = _two_owners()
    _slowed(monkeypatch, 0.3, only=first.id)
    monkeypatch.setattr(claims, "CLAIM_WORKERS", 1)

    async def go():
        making = asyncio.create_task(claims.claim(first.id, first.owner_id, "go"))
        await asyncio.sleep(0.1)  # its group is in the thread
        queued = asyncio.create_task(claims.claim(second.id, second.owner_id, "go"))
        await asyncio.sleep(0.05)  # behind it, waiting for the next group
        making.cancel()
        queued.cancel()
        await asyncio.gather(making, queued, return_exceptions=True)
        for _ in range(100):  # the release, in the background
            if not claims._giving_back and await sync_to_async(_idle)(first.id):
                return
            await asyncio.sleep(0.02)

    asyncio.run(go())
    states = [Conversation.objects.get(id=c.id) for c in (first, second)]
    assert [(c.state, c.lease_owner) for c in states] == [("idle", ""), ("idle", "")]
    assert states[1].title == ""  # never claimed at all


def _idle(conversation_id) -> bool:
    return Conversation.objects.get(id=conversation_id).state == "idle"


def test_a_slow_start_does_not_hold_up_another_users_claim(monkeypatch, settings, tmp_path):
    """A workspace mounted on first use takes a while: the other worker takes the next
    group meanwhile. (Within the transaction, SQLite's one writer serialises claims anyway.)"""
    settings.HARNESS_WORKSPACES = tmp_path / "workspaces"
    first, second = _two_owners()
    made = claims.workspace_for

    def slow_for_the_first(owner_id):
        if owner_id == first.owner_id:
            time.sleep(1.0)
        return made(owner_id)

    monkeypatch.setattr(claims, "workspace_for", slow_for_the_first)

    async def go() -> float:
        slow = asyncio.create_task(claims.claim(first.id, first.owner_id, "go"))
        await asyncio.sleep(0.1)
        started = time.perf_counter()
        await claims.claim(second.id, second.owner_id, "go")
        waited = time.perf_counter() - started
        await slow
        return waited

    assert asyncio.run(go()) < 0.8


def test_a_claim_raising_what_asyncio_cannot_carry_fails_alone_and_claims_go_on(monkeypatch):
    first, second = _two_owners()
    claim_one = claims._claim

    def odd(request):
        if request.conversation_id == first.id:
            raise StopIteration  # asyncio cannot put this into a future
        return claim_one(request)

    monkeypatch.setattr(claims, "_claim", odd)

    async def go():
        with pytest.raises(RuntimeError):
            await asyncio.wait_for(claims.claim(first.id, first.owner_id, "go"), 5)
        return await asyncio.wait_for(claims.claim(second.id, second.owner_id, "go"), 5)

    assert isinstance(asyncio.run(go()), Setup)


def test_event_loops_that_closed_leave_no_claims_threads_behind():
    (conversation,) = _conversations(1)

    def threads() -> int:
        return sum(t.name.startswith("harness-claims") for t in threading.enumerate())

    for _ in range(6):
        assert isinstance(asyncio.run(claims.claim(conversation.id, conversation.owner_id,
                                                   "go")), Setup)  # fmt: skip
        Conversation.objects.filter(id=conversation.id).update(state="idle")
    time.sleep(0.2)  # the closed loops' threads end
    assert threads() <= claims.CLAIM_WORKERS
    assert sum(not loop.is_closed() for loop in grouping._groups) <= 1


def test_on_sqlite_claims_and_the_event_log_take_turns_through_one_writers_lock():
    """SQLite has one writer: a waiting BEGIN IMMEDIATE sleeps in growing steps. The
    grouped writers wait on a lock instead, which the last one's commit hands on at once."""
    from django.db import connection

    from agent.core.events import StatusEvent
    from agent.runs import eventlog

    if connection.vendor != "sqlite":
        pytest.skip("the lock is SQLite's only")
    first, second = _conversations(2)
    writes = {
        "claim": lambda: claims.claim(first.id, first.owner_id, "go"),
        "event log": lambda: eventlog.store(second.id, [StatusEvent(seq=1, state="thinking")]),
    }
    for what, write in writes.items():
        done = threading.Event()
        worker = threading.Thread(target=lambda w=write, d=done: (asyncio.run(w()), d.set()))
        with grouping._sqlite_writer.turn(urgent=False):  # another writer's turn
            worker.start()
            assert not done.wait(0.3), f"the {what} wrote while another writer had its turn"
        assert done.wait(10), f"the {what} never got its turn"
        worker.join()
    assert Conversation.objects.get(id=first.id).state == "running"
    assert Event.objects.filter(conversation=second).count() == 1


def _until(condition) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "the writer never came to wait"
        time.sleep(0.001)


def test_the_event_log_writes_before_claims_waiting_and_they_then_alternate():
    """Runs already streaming wait on the event log (a run's first deltas wait for its
    prompt's events): its turn comes before the claims waiting, and a claim's after it,
    so neither kind waits out a run of the other's turns."""
    turns = grouping._Turns()
    order: list[str] = []

    def write(name: str, urgent: bool) -> None:
        with turns.turn(urgent):
            order.append(name)

    writers = []
    with turns.turn(urgent=False):  # a claim group's turn
        for name, urgent in (("claim 1", False), ("claim 2", False), ("log 1", True),
                             ("log 2", True)):  # fmt: skip
            writers.append(threading.Thread(target=write, args=(name, urgent)))
            writers[-1].start()
            _until(lambda: turns._urgent + turns._others == len(writers))
    for writer in writers:
        writer.join(10)
    assert [name.split()[0] for name in order] == ["log", "claim", "log", "claim"], order


def test_a_burst_of_claims_is_made_in_groups_of_a_bounded_size(groups, settings):
    """A group holds SQLite's one writer while it is made: a bounded group lets the event
    log's turn come sooner under a burst of prompts."""
    settings.HARNESS_CONCURRENT_RUNS = 30
    conversations = _conversations(claims.CLAIM_GROUP * 2 + 3)
    results = _sent_together(conversations)
    assert all(isinstance(result, Setup) for result in results), results
    assert sorted(groups, reverse=True) == [claims.CLAIM_GROUP, claims.CLAIM_GROUP, 3]
    assert set(Conversation.objects.values_list("state", flat=True)) == {"running"}


def test_a_group_reads_its_conversations_once_and_each_claim_decides_on_them(settings):
    """The group's conversations, owners and memberships are read together; two prompts on
    one conversation in a group: the second is refused as running (it reads the row
    again), a collaborator's claim names its author, a missing one is not found."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agent.models import Membership

    settings.HARNESS_CONCURRENT_RUNS = 10
    ada_first, ada_second = _conversations(2)
    bob = User.objects.create_user("bob", password="pw-bob-12345")
    Membership.objects.create(conversation=ada_second, user=bob, role="collaborator")
    ada = ada_first.owner_id
    requests = [claims._Claim(ada_first.id, ada, "one"), claims._Claim(ada_first.id, ada, "two"),
                claims._Claim(ada_second.id, bob.pk, "three"),
                claims._Claim("7f1d1a4e-0000-4000-8000-000000000000", ada, "four")]  # fmt: skip
    with CaptureQueriesContext(connection) as queries:
        results = claims._claim_together(requests)
    assert isinstance(results[0], Setup) and results[0].author is None  # never shared
    assert isinstance(results[1], RunRefused) and results[1].code == "prompt_running"
    assert isinstance(results[2], Setup) and results[2].author == "bob"
    assert isinstance(results[3], RunRefused) and results[3].code == "not_found"
    reads = [q["sql"] for q in queries if 'FROM "agent_conversation" INNER JOIN' in q["sql"]]
    assert " IN (" in reads[0], reads  # the group's read, first
    # read again: the second claim's row (its first claim took it), the missing one's
    again = [sql for sql in reads[1:] if ada_second.id.hex in sql or ada_first.id.hex in sql]
    assert len(again) == 1 and ada_first.id.hex in again[0], reads
    assert Conversation.objects.get(id=ada_first.id).title == "one"


def test_a_slow_workspace_holds_up_only_its_own_claim(groups, settings, monkeypatch):
    """A new user's workspace is made on their first prompt (their sandbox's host started):
    the other claims of its group start meanwhile instead of waiting for it. The slow one
    waits until the quick one has returned (a claim that waited for it would hang)."""
    settings.HARNESS_CONCURRENT_RUNS = 10
    (slow,) = _conversations(1)
    quick = Conversation.objects.create(
        owner=User.objects.create_user("bea", password="pw-bea-12345"), model="m"
    )
    released = threading.Event()
    made = claims.workspace_for

    def workspace_for(user_id):
        if user_id == slow.owner_id and not released.wait(20):
            raise TimeoutError("the quick claim waited for the slow workspace")
        return made(user_id)

    monkeypatch.setattr(claims, "workspace_for", workspace_for)

    async def quick_then_release():
        setup = await claims.claim(quick.id, quick.owner_id, "go")
        released.set()
        return setup

    async def send():
        return await asyncio.gather(claims.claim(slow.id, slow.owner_id, "go"),
                                    quick_then_release())  # fmt: skip

    slow_setup, quick_setup = asyncio.run(send())
    assert groups == [2]
    assert slow_setup.unprepared is None and quick_setup.unprepared is None
    assert slow_setup.workspace is not None and quick_setup.workspace is not None


class _Undone(Exception):
    """As psycopg's errors do, it carries its SQLSTATE (Django's wrapper has it as cause)."""

    def __init__(self, sqlstate: str):
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


@pytest.mark.parametrize("sqlstate, tries", [("40P01", 2), ("40001", 2), ("23505", 1)])
def test_an_item_alone_is_done_again_only_when_the_database_undid_it(sqlstate, tries):
    undone = _Undone(sqlstate)
    calls = []

    def together(items):
        calls.append("together")
        raise OperationalError("deadlock detected") from undone

    def alone(item):
        calls.append("alone")
        return item * 2

    if tries == 1:
        with pytest.raises(OperationalError):
            grouping.together_or_alone([21], together, alone, "tries")
        assert calls == ["together"]
    else:
        assert grouping.together_or_alone([21], together, alone, "tries") == [42]
        assert calls == ["together", "alone"]
