"""A reader's credential read again from the database, and the process's re-checks run
together.

A message telling a socket or an event stream that its access ended can be lost (a layer
outage, a bulk ``update()`` that sends no signal), so every reader also re-reads its
credential: on demand (a frame from the page, a sharing or password change, a heartbeat)
and, while events flow, at most once per ``RECHECK_INTERVAL`` beside them rather than in
front of them (a round trip must not hold frames up; what can still go out after a
revocation is bounded by the interval).

Each check is one query; run one by one, a hundred streaming readers made a hundred worker
thread hops and database connections a second, and that cost showed in every reader's
latency. So the checks of a process go to the database together (``Checks``): those asked
while a worker call is under way, and the background ones of the next ``GATHER`` seconds,
run in the next call, one after another on one connection. An urgent check does not wait
for the gathering window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from channels.db import database_sync_to_async

log = logging.getLogger(__name__)

# While events flow, the credential is re-checked at most this often (seconds): a query
# per frame would be one per 50 ms per reader.
RECHECK_INTERVAL = 1.0
# How long background checks wait for others to go with them (seconds).
GATHER = 0.25


def _run_all(queries: list[Callable[[], Any]]) -> list[tuple[bool, Any]]:
    """In a worker thread: each query's (True, result) or (False, exception)."""
    answers: list[tuple[bool, Any]] = []
    for query in queries:
        try:
            answers.append((True, query()))
        except Exception as error:  # one reader's failure is not the others'
            answers.append((False, error))
    return answers


_run_in_worker = database_sync_to_async(_run_all, thread_sensitive=False)


class Checks:
    """One event loop's credential queries, run in batches (one worker call each)."""

    def __init__(self) -> None:
        self.waiting: list[tuple[Callable[[], Any], asyncio.Future]] = []
        self.urgent = asyncio.Event()
        self.draining: asyncio.Task | None = None
        self.calls = 0  # worker calls made (each runs a batch)

    async def run(self, query: Callable[[], Any], urgent: bool) -> Any:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((query, future))
        if urgent:
            self.urgent.set()
        if self.draining is None:
            self.draining = asyncio.ensure_future(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self.waiting:
                if not self.urgent.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.urgent.wait(), GATHER)
                self.urgent.clear()
                batch, self.waiting = self.waiting, []
                self.calls += 1
                try:
                    answers = await _run_in_worker([query for query, _ in batch])
                except Exception as error:  # the worker call itself failed
                    answers = [(False, error)] * len(batch)
                for (_, future), (ok, value) in zip(batch, answers, strict=True):
                    if not future.done():  # its reader may have gone meanwhile
                        future.set_result(value) if ok else future.set_exception(value)
        finally:
            self.draining = None


_checks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Checks] = weakref.WeakKeyDictionary()


def checks() -> Checks:
    loop = asyncio.get_running_loop()
    found = _checks.get(loop)
    if found is None:
        found = _checks[loop] = Checks()
    return found


class Recheck:
    """One reader's credential: ``query`` reads it (blocking; run in a worker thread with
    the process's other checks) and ``verdict`` turns the answer into why the credential no
    longer holds (NOT_FOUND or SIGNED_OUT), or None while it does."""

    def __init__(self, query: Callable[[], Any], verdict: Callable[[Any], str | None]) -> None:
        self.query, self.verdict = query, verdict
        self.at = time.monotonic()
        self.pending: asyncio.Future | None = None

    async def _ask(self, urgent: bool) -> str | None:
        return self.verdict(await checks().run(self.query, urgent))

    async def now(self) -> str | None:
        self.at = time.monotonic()
        return await self._ask(urgent=True)

    def beside(self, denied: Callable[[], None]) -> None:
        """Starts a check in the background if the last one is older than the interval;
        ``denied`` is called if it finds the credential no longer holds."""
        if self.pending is None and time.monotonic() - self.at >= RECHECK_INTERVAL:
            self.at = time.monotonic()
            self.pending = asyncio.ensure_future(self._quietly())
            self.pending.add_done_callback(
                lambda done: done.cancelled() or done.result() is None or denied()
            )

    async def _quietly(self) -> str | None:
        try:
            return await self._ask(urgent=False)
        except Exception:  # a database hiccup: the next message or frame checks again
            log.exception("could not re-check a reader's credential")
            return None

    def failed(self) -> str | None:
        """Why the background check found that the credential no longer holds, if it did
        (an answer is read once)."""
        if self.pending is None or not self.pending.done():
            return None
        pending, self.pending = self.pending, None
        return pending.result()

    def cancel(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
            self.pending = None
