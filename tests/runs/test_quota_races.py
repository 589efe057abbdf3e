"""Quotas under attack on PostgreSQL, which runs transactions at once where SQLite runs
writers one after the other: many forks, follow-ups or prompts, sent at the same instant by
real threads through the real code, must not pass the bound together (a read-then-write
check let 12 forks keep 79 MB of images against 16 MB, 8 follow-ups in against 4 a minute,
and 11 prompts run against 2 at once).

The races run in a ``manage.py shell`` on a fresh PostgreSQL database (the test process's
own database is SQLite); the functions below are what that shell runs."""

from __future__ import annotations

import json
import threading
from functools import partial

import pytest

from testkit.live import LiveServer

pytestmark = pytest.mark.services

THREADS = 12
QUOTA_MB = 1
IMAGE = 300 * 1024  # three fit in the quota, the fourth does not
PER_MINUTE = 4
AT_ONCE = 2


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    from tests.services import fresh_pg_database

    with fresh_pg_database(migrated=True) as database_url:
        server = LiveServer(tmp_path_factory.mktemp("races"), DATABASE_URL=database_url,
                            ANTHROPIC_API_KEY="test-key")  # fmt: skip
        server.migrate()
        yield server


def race(server: LiveServer, name: str) -> dict:
    code = f"import json, {__name__} as m\nprint(json.dumps(m.{name}()))"
    return json.loads(server.manage("shell", "-c", code).strip().splitlines()[-1])


def test_concurrent_forks_keep_the_forkers_images_within_the_quota(postgres):
    outcome = race(postgres, "fork_race")
    assert outcome["errors"] == []
    assert outcome["kept_bytes"] <= QUOTA_MB * 1024 * 1024, outcome
    assert outcome["forked"] == 3 and outcome["refused"] == THREADS - 3, outcome


def test_concurrent_follow_ups_are_held_to_the_prompts_per_minute(postgres):
    outcome = race(postgres, "follow_up_race")
    assert outcome["errors"] == []
    assert outcome["accepted"] == PER_MINUTE and outcome["refused"] == THREADS - PER_MINUTE, outcome
    assert outcome["counted"] == PER_MINUTE  # a refused one is not counted either


def test_concurrent_prompts_are_held_to_the_prompts_running_at_once(postgres):
    outcome = race(postgres, "claim_race")
    assert outcome["errors"] == []
    assert outcome["running"] == AT_ONCE and outcome["refused"] == THREADS - AT_ONCE, outcome


def test_a_page_read_during_a_claim_neither_waits_for_the_owner_nor_deadlocks(postgres):
    # The read locked the owner's row too (its query joins it), after the conversation's;
    # a claim holds the owner's row (the rate), then updates the conversation: PostgreSQL
    # found the deadlock and failed the prompt (seen in tests/deploy/test_scale_out.py).
    outcome = race(postgres, "read_during_claim")
    assert outcome["errors"] == []
    assert outcome["read_while_claiming"] and outcome["claimed"], outcome


def test_groups_of_claims_crossing_owners_take_their_locks_in_one_order(postgres):
    # Each claim holds its owner's row, then its conversation's; two groups, one with
    # claims of A then B, the other of B then A, deadlocked, and PostgreSQL undid one.
    outcome = race(postgres, "crossing_groups")
    assert outcome["errors"] == [] and outcome["fell_back"] == 0, outcome
    assert outcome["claimed"] == outcome["expected"], outcome


# -- run in the shell, on PostgreSQL --------------------------------------------------------
def at_once(action) -> list:
    """``action()`` in THREADS threads released together; each one's result or exception."""
    return each_at_once([action] * THREADS)


def each_at_once(actions: list) -> list:
    """Each action in a thread of its own, the threads released together; each one's
    result or exception."""
    from django.db import connection

    barrier = threading.Barrier(len(actions))
    results: list = [None] * len(actions)

    def worker(index: int) -> None:
        try:
            barrier.wait()
            results[index] = actions[index]()
        except Exception as exc:  # noqa: BLE001 - the caller sorts outcomes
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(actions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def _refused(results: list, code: str) -> tuple[int, list[str]]:
    """How many were refused with ``code``, and any other exception (as text)."""
    from agent.runs.claim import RunRefused

    refused = [r for r in results if isinstance(r, RunRefused) and r.code == code]
    others = [repr(r) for r in results if isinstance(r, Exception) and r not in refused]
    return len(refused), others


def fork_race() -> dict:
    from django.db.models import Sum
    from django.test import override_settings

    from agent.core.images import ImageRef
    from agent.models import Attachment, Conversation, Event, User
    from agent.runs import attachments
    from agent.runs.branches import fork_copy

    owner = User.objects.create_user("shown", password="pw-shown-1234")
    forker = User.objects.create_user("forker", password="pw-forker-1234")
    original = Conversation.objects.create(owner=owner, model="claude-haiku-4-5", last_seq=1)
    image = attachments.Snapshot(ImageRef("ab" * 32, "image/png", "uploads/a.png"), b"\x89" * IMAGE)
    with override_settings(HARNESS_WORKSPACE_QUOTA_MB=QUOTA_MB):
        attachments.store(original.id, owner.pk, [image])
        Event.objects.create(conversation=original, seq=1, type="user",
                             payload={"type": "user", "seq": 1, "content": "see",
                                      "images": [image.ref.to_dict()]})  # fmt: skip
        results = at_once(lambda: fork_copy(original, forker, None))
    refused, errors = _refused(results, "quota_exceeded")
    kept = Attachment.objects.filter(conversation__owner=forker).aggregate(total=Sum("size"))
    return {"forked": Conversation.objects.filter(owner=forker).count(), "refused": refused,
            "kept_bytes": kept["total"] or 0, "errors": errors}  # fmt: skip


def follow_up_race() -> dict:
    from asgiref.sync import async_to_sync
    from django.test import override_settings

    from agent.models import Conversation, User
    from agent.runs import rate
    from agent.runs.claim import check_queueing

    owner = User.objects.create_user("hasty", password="pw-hasty-1234")
    running = Conversation.objects.create(owner=owner, model="claude-haiku-4-5", state="running")
    with override_settings(HARNESS_RUNS_PER_MINUTE=PER_MINUTE):
        results = at_once(lambda: async_to_sync(check_queueing)(running.id, owner.pk))
    refused, errors = _refused(results, "quota_rate")
    owner.refresh_from_db()
    accepted = sum(1 for r in results if not isinstance(r, Exception))
    return {"accepted": accepted, "refused": refused, "counted": rate.sent_last_minute(owner),
            "errors": errors}  # fmt: skip


def claim_race() -> dict:
    """Prompts in as many conversations of one owner, claimed at once (as many sockets or
    processes would)."""
    from asgiref.sync import async_to_sync
    from django.test import override_settings

    from agent.models import Conversation, User
    from agent.runs.claim import claim

    owner = User.objects.create_user("eager", password="pw-eager-1234")
    waiting = [Conversation.objects.create(owner=owner, model="claude-haiku-4-5").id
               for _ in range(THREADS)]  # fmt: skip
    with override_settings(HARNESS_CONCURRENT_RUNS=AT_ONCE):
        results = at_once(lambda: async_to_sync(claim)(waiting.pop(), owner.pk, "go"))
    refused, errors = _refused(results, "quota_concurrent")
    running = Conversation.objects.filter(owner=owner, state="running").count()
    return {"running": running, "refused": refused, "errors": errors}


def read_during_claim() -> dict:
    """A claim holds the owner's row (as its rate check does) while a page reads the
    conversation; then the claim updates the conversation and commits."""
    from django.db import connection, transaction

    from agent.models import Conversation, User
    from agent.runs import rate
    from agent.runs.snapshot import snapshot

    owner = User.objects.create_user("reader", password="pw-reader-1234")
    conversation = Conversation.objects.create(owner=owner, model="claude-haiku-4-5")
    holding, read = threading.Event(), threading.Event()
    errors: list[str] = []
    outcome = {"read_while_claiming": False, "claimed": False}

    def claimer() -> None:
        try:
            with transaction.atomic():
                rate.count_prompt(owner.pk)
                holding.set()
                outcome["read_while_claiming"] = read.wait(5)
                Conversation.objects.filter(pk=conversation.pk).update(state="running")
            outcome["claimed"] = True
        except Exception as exc:  # noqa: BLE001 - the outcome reports it
            errors.append(repr(exc))
        finally:
            connection.close()

    def reader() -> None:
        try:
            holding.wait(5)
            if snapshot(conversation.id, owner) is not None:
                read.set()
        except Exception as exc:  # noqa: BLE001 - the outcome reports it
            errors.append(repr(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=claimer), threading.Thread(target=reader)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {**outcome, "errors": errors}


def crossing_groups(rounds: int = 15) -> dict:
    """Two groups of claims handled at once (as the claims' two workers do), each with a
    claim of owner A and one of owner B, in opposite orders; every claim is released
    after its round."""
    import logging

    from django.test import override_settings

    from agent.models import Conversation, User
    from agent.runs import claim

    owners = [User.objects.create_user(name, password=f"pw-{name}-1234") for name in ("ann", "bob")]
    made = {(o.pk, i): Conversation.objects.create(owner=o, model="claude-haiku-4-5").id
            for o in owners for i in range(2)}  # fmt: skip
    a, b = owners[0].pk, owners[1].pk
    groups = [[claim._Claim(made[key], key[0], "go") for key in keys]
              for keys in ([(a, 0), (b, 0)], [(b, 1), (a, 1)])]  # fmt: skip
    fell_back: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: fell_back.append(record.getMessage())
    logging.getLogger("agent.server.grouping").addHandler(handler)
    errors, claimed = [], 0
    with override_settings(HARNESS_RUNS_PER_MINUTE=1000, HARNESS_CONCURRENT_RUNS=10):
        for _ in range(rounds):
            results = each_at_once([partial(claim._claim_together, group) for group in groups])
            for result in (r for group in results for r in _listed(group)):
                if isinstance(result, Exception):
                    errors.append(repr(result))
                else:
                    claimed += 1
            Conversation.objects.update(state="idle", lease_owner="", lease_until=None)
    return {"claimed": claimed, "expected": 4 * rounds, "errors": errors,
            "fell_back": len(fell_back)}  # fmt: skip


def _listed(result) -> list:
    """A group's results, or the exception that failed the group whole, as one result."""
    return [result] if isinstance(result, Exception) else result
