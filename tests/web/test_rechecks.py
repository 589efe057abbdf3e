"""The process's credential re-checks go to the database together: many readers' checks
in one worker call, each reader getting its own answer."""

from __future__ import annotations

import asyncio
import threading

from agent.web import rechecks
from agent.web.rechecks import Recheck, checks


def _reader(answers: dict, name: str, valid: bool = True) -> Recheck:
    def query():
        answers[name] = threading.current_thread().name
        return valid

    return Recheck(query, lambda ok: None if ok else "signed_out")


async def test_urgent_checks_asked_together_share_a_worker_call():
    answers: dict = {}
    readers = [_reader(answers, f"r{i}", valid=i % 7 != 3) for i in range(40)]
    before = checks().calls
    verdicts = await asyncio.gather(*(reader.now() for reader in readers))
    assert verdicts == [None if i % 7 != 3 else "signed_out" for i in range(40)]
    assert len(answers) == 40
    # The first check's call starts at once; the others wait for it and go in one more.
    assert checks().calls - before <= 2
    assert threading.current_thread().name not in answers.values()  # off the event loop


async def test_background_checks_of_many_readers_go_in_one_call(monkeypatch):
    monkeypatch.setattr(rechecks, "RECHECK_INTERVAL", 0.0)
    answers: dict = {}
    readers = [_reader(answers, f"r{i}", valid=i != 5) for i in range(30)]
    denied = []
    before = checks().calls
    for i, reader in enumerate(readers):
        reader.beside(lambda i=i: denied.append(i))
    await asyncio.gather(*(reader.pending for reader in readers))
    await asyncio.sleep(0)  # the done callbacks
    assert checks().calls - before == 1
    assert denied == [5]
    assert readers[5].failed() == "signed_out" and readers[4].failed() is None


async def test_one_readers_failing_query_is_its_own():
    def broken():
        raise RuntimeError("database hiccup")

    good = Recheck(lambda: True, lambda ok: None if ok else "signed_out")
    bad = Recheck(broken, lambda ok: None)
    results = await asyncio.gather(good.now(), bad.now(), return_exceptions=True)
    assert results[0] is None
    assert isinstance(results[1], RuntimeError)


async def test_a_reader_gone_before_its_answer_does_not_break_the_batch(monkeypatch):
    monkeypatch.setattr(rechecks, "RECHECK_INTERVAL", 0.0)
    answers: dict = {}
    leaving, staying = _reader(answers, "leaving"), _reader(answers, "staying", valid=False)
    denied = []
    leaving.beside(lambda: denied.append("leaving"))
    staying.beside(lambda: denied.append("staying"))
    leaving.cancel()
    await staying.pending
    await asyncio.sleep(0)
    assert denied == ["staying"]
