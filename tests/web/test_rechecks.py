"""The process's credential re-checks go to the database together: on-demand ones in one
worker call, background ones in passes that read the rows every reader's credential is made
of and run a reader's full check only when its rows changed."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async

from agent.models import Conversation, Membership, User
from agent.web import rechecks
from agent.web.rechecks import Recheck, Watch, checks

pytestmark = pytest.mark.django_db(transaction=True)


def _reader(answers: dict, name: str, valid: bool = True, watch=None) -> Recheck:
    def query():
        answers[name] = answers.get(name, 0) + 1
        answers.setdefault("threads", set()).add(threading.current_thread().name)
        return valid() if callable(valid) else valid

    watch = watch or Watch(1, Conversation().id)
    return Recheck(query, lambda ok: None if ok else "signed_out", watch)


async def test_on_demand_checks_asked_together_share_a_worker_call():
    answers: dict = {}
    readers = [_reader(answers, f"r{i}", valid=i % 7 != 3) for i in range(40)]
    before = checks().calls
    verdicts = await asyncio.gather(*(reader.now() for reader in readers))
    assert verdicts == [None if i % 7 != 3 else "signed_out" for i in range(40)]
    assert all(answers[f"r{i}"] == 1 for i in range(40))
    # The first check's call starts at once; the others wait for it and go in one more.
    assert checks().calls - before <= 2
    assert threading.current_thread().name not in answers["threads"]  # off the event loop


async def test_one_readers_failing_query_is_its_own():
    def broken():
        raise RuntimeError("database hiccup")

    good = _reader({}, "good")
    bad = Recheck(broken, lambda ok: None, Watch(1, Conversation().id))
    results = await asyncio.gather(good.now(), bad.now(), return_exceptions=True)
    assert results[0] is None
    assert isinstance(results[1], RuntimeError)


def _people(count: int):
    owner = User.objects.create_user(username="owner", password="pw-owner-1234")
    conversation = Conversation.objects.create(owner=owner, model="m", team=False)
    readers = [User.objects.create_user(username=f"reader{i}", password="pw-reader-1234")
               for i in range(count)]  # fmt: skip
    for reader in readers:
        Membership.objects.create(conversation=conversation, user=reader, role="viewer")
    return conversation, readers


async def _one_pass(readers: list[Recheck], denied: list) -> int:
    before = checks().calls
    for i, reader in enumerate(readers):
        reader.beside(lambda i=i: denied.append(i))
    while any(reader.denied is not None for reader in readers):
        await asyncio.sleep(0.02)
    return checks().calls - before


async def test_background_checks_run_the_full_check_only_when_rows_change(monkeypatch):
    monkeypatch.setattr(rechecks, "RECHECK_INTERVAL", 0.0)
    conversation, people = await sync_to_async(_people)(30)
    answers: dict = {}
    still = {person.pk: True for person in people}
    readers = [_reader(answers, person.pk, valid=lambda pk=person.pk: still[pk],
                       watch=Watch(person.pk, conversation.id)) for person in people]  # fmt: skip
    denied: list = []
    # The first pass: every reader's full check (nothing seen yet), in one worker call.
    assert await _one_pass(readers, denied) == 1
    assert all(answers[person.pk] == 1 for person in people) and denied == []
    # Nothing changed: one call, no full check.
    assert await _one_pass(readers, denied) == 1
    assert all(answers[person.pk] == 1 for person in people)
    # One reader's membership goes without a signal (a bulk delete); another's password
    # changes behind its back: only theirs are checked again.
    gone, changed = people[4], people[9]
    await sync_to_async(Membership.objects.filter(user=gone).delete)()
    await sync_to_async(User.objects.filter(pk=changed.pk).update)(password="other")
    still[gone.pk] = still[changed.pk] = False
    assert await _one_pass(readers, denied) == 1
    assert sorted(denied) == [4, 9]
    assert answers[gone.pk] == answers[changed.pk] == 2
    assert sum(answers[person.pk] for person in people) == 32
    assert readers[4].failed() == "signed_out" and readers[5].failed() is None


async def test_every_input_of_the_access_rule_is_watched():
    conversation, people = await sync_to_async(_people)(1)
    watch = Watch(people[0].pk, conversation.id)
    inputs = sync_to_async(rechecks._inputs)
    seen = (await inputs([watch]))[watch]
    changes = [
        lambda: Membership.objects.filter(user=people[0]).update(role="collaborator"),
        lambda: Conversation.objects.filter(pk=conversation.pk).update(team=True),
        lambda: User.objects.filter(pk=conversation.owner_id).update(is_active=False),
        lambda: User.objects.filter(pk=people[0].pk).update(is_active=False),
        lambda: User.objects.filter(pk=people[0].pk).update(password="x"),
        lambda: Membership.objects.filter(user=people[0]).delete(),
    ]
    for change in changes:
        await sync_to_async(change)()
        now = (await inputs([watch]))[watch]
        assert now != seen
        seen = now


async def test_a_reader_gone_before_its_pass_is_left_out(monkeypatch):
    monkeypatch.setattr(rechecks, "RECHECK_INTERVAL", 0.0)
    answers: dict = {}
    leaving, staying = _reader(answers, "leaving"), _reader(answers, "staying", valid=False)
    denied: list = []
    leaving.beside(lambda: denied.append("leaving"))
    staying.beside(lambda: denied.append("staying"))
    leaving.cancel()
    while staying.denied is not None:
        await asyncio.sleep(0.02)
    assert denied == ["staying"] and "leaving" not in answers
