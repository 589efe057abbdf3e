"""A reader's credential read again from the database, and the process's re-checks run
together.

A message telling a socket or an event stream that its access ended can be lost (a layer
outage, a bulk ``update()`` that sends no signal), so every reader also re-reads its
credential: on demand (a frame from the page, a sharing or password change, a heartbeat:
``Recheck.now``) and, while events flow, within about ``RECHECK_INTERVAL`` of a change to
what the credential is made of (``Recheck.beside``), beside the frames rather than in front
of them (a round trip must not hold frames up).

Run one by one, a reader's check is a query the ORM compiles each time (the access rule's
subqueries: about 3 ms of CPU); a hundred streaming readers checking once a second spent a
third of a core on it, and it showed in every reader's latency. So the background checks
of a process go together: once per pass, a few simple queries read the rows every waiting
reader's credential is made of (``Watch``: the access rule's inputs, ``access.rule_inputs``;
the password; the session; the token), and the full check runs only for the readers whose
rows changed since their last pass, in the same worker call. On-demand checks asked while a
worker call is under way go together in the next one (``Checks``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.sessions.models import Session
from django.utils import timezone

from agent.access import rule_inputs
from agent.models import ApiToken, User
from agent.web.revocation import DB_SESSION_ENGINES

log = logging.getLogger(__name__)

# While events flow, a change to a reader's credential is seen within about this long
# (seconds; a pass every GATHER, a reader in at most one pass per interval).
RECHECK_INTERVAL = 1.0
GATHER = 0.25


@dataclass(frozen=True)
class Watch:
    """The rows a reader's credential is made of."""

    user: int
    conversation: uuid.UUID
    session: str | None = None  # a browser socket's session key
    token: int | None = None  # an event stream's API token


def _inputs(watches: list[Watch]) -> dict[Watch, tuple]:
    """For each reader, its credential's rows as they are now (a value that changes when
    one of them does)."""
    rule = rule_inputs({(watch.user, watch.conversation) for watch in watches})
    users = {watch.user for watch in watches}
    passwords = dict(User.objects.filter(pk__in=users).values_list("pk", "password"))
    keys = {watch.session for watch in watches if watch.session}
    alive: set[str] = set()
    if keys and settings.SESSION_ENGINE in DB_SESSION_ENGINES:
        rows = Session.objects.filter(session_key__in=keys, expire_date__gt=timezone.now())
        alive = set(rows.values_list("session_key", flat=True))
    ids = {watch.token for watch in watches if watch.token is not None}
    tokens = {}
    if ids:
        rows = ApiToken.objects.filter(pk__in=ids).values_list("pk", "revoked", "user_id")
        tokens = {pk: (revoked, user) for pk, revoked, user in rows}
    return {
        watch: (
            rule[(watch.user, watch.conversation)],
            passwords.get(watch.user),
            watch.session in alive,
            tokens.get(watch.token),
        )  # fmt: skip
        for watch in watches
    }


def _pass(readers: list[tuple[Watch, tuple | None, Callable[[], Any]]]) -> list[Any]:
    """In a worker thread, for each (watch, rows last seen, full query): None if its rows
    did not change, else (rows now, True, the query's answer) or (rows now, False, the
    exception it raised)."""
    now = _inputs([watch for watch, _, _ in readers])
    answers: list[Any] = []
    for watch, seen, query in readers:
        if now[watch] == seen:
            answers.append(None)
            continue
        try:
            answers.append((now[watch], True, query()))
        except Exception as error:  # one reader's failure is not the others'
            answers.append((now[watch], False, error))
    return answers


def _run_all(queries: list[Callable[[], Any]]) -> list[tuple[bool, Any]]:
    """In a worker thread: each query's (True, result) or (False, exception)."""
    answers: list[tuple[bool, Any]] = []
    for query in queries:
        try:
            answers.append((True, query()))
        except Exception as error:
            answers.append((False, error))
    return answers


_pass_in_worker = database_sync_to_async(_pass, thread_sensitive=False)
_run_in_worker = database_sync_to_async(_run_all, thread_sensitive=False)


class Checks:
    """One event loop's re-checks: on-demand ones in batches (``run``), background ones in
    passes (``enrol``)."""

    def __init__(self) -> None:
        self.waiting: list[tuple[Callable[[], Any], asyncio.Future]] = []
        self.draining: asyncio.Task | None = None
        self.due: dict[Recheck, None] = {}  # the readers of the next pass, in order
        self.passing: asyncio.Task | None = None
        self.calls = 0  # worker calls made, batches and passes

    async def run(self, query: Callable[[], Any]) -> Any:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((query, future))
        if self.draining is None:
            self.draining = asyncio.ensure_future(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self.waiting:
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

    def enrol(self, reader: Recheck) -> None:
        self.due[reader] = None
        if self.passing is None:
            self.passing = asyncio.ensure_future(self._passes())

    def leave(self, reader: Recheck) -> None:
        self.due.pop(reader, None)

    async def _passes(self) -> None:
        try:
            while self.due:
                await asyncio.sleep(GATHER)  # the others due soon go in the same pass
                readers, self.due = list(self.due), {}
                self.calls += 1
                try:
                    answers = await _pass_in_worker(
                        [(reader.watch, reader.seen, reader.query) for reader in readers]
                    )
                except Exception:  # a database hiccup: they are asked again
                    log.exception("could not re-check readers' credentials")
                    answers = [None] * len(readers)
                for reader, answer in zip(readers, answers, strict=True):
                    reader.answered(answer)
        finally:
            self.passing = None


_checks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Checks] = weakref.WeakKeyDictionary()


def checks() -> Checks:
    loop = asyncio.get_running_loop()
    found = _checks.get(loop)
    if found is None:
        found = _checks[loop] = Checks()
    return found


class Recheck:
    """One reader's credential: ``query`` reads it (blocking; run in a worker thread with
    the process's other checks), ``verdict`` turns the answer into why it no longer holds
    (NOT_FOUND or SIGNED_OUT) or None while it does, and ``watch`` names its rows."""

    def __init__(self, query: Callable[[], Any], verdict: Callable[[Any], str | None],
                 watch: Watch) -> None:  # fmt: skip
        self.query, self.verdict, self.watch = query, verdict, watch
        self.at = time.monotonic()
        self.seen: tuple | None = None  # the rows at the last background check
        self.denied: Callable[[], None] | None = None  # set while in a pass
        self.reason: str | None = None
        self.closed = False
        self.passes: Checks | None = None  # the checks it was last enrolled with

    async def now(self) -> str | None:
        self.at = time.monotonic()
        return self.verdict(await checks().run(self.query))

    def beside(self, denied: Callable[[], None]) -> None:
        """Puts the reader in the next background pass, if its last check is older than the
        interval; ``denied`` is called if the pass finds the credential no longer holds."""
        if self.closed or self.denied is not None:
            return
        if time.monotonic() - self.at >= RECHECK_INTERVAL:
            self.at = time.monotonic()
            self.denied = denied
            self.passes = checks()
            self.passes.enrol(self)

    def answered(self, answer) -> None:
        """A pass's answer (on the event loop): None when the rows did not change."""
        denied, self.denied = self.denied, None
        if answer is None or self.closed:
            return
        rows, ok, value = answer
        if not ok:  # a database hiccup: the next pass checks again
            log.error("could not re-check a reader's credential", exc_info=value)
            return
        self.seen = rows
        self.reason = self.verdict(value)
        if self.reason is not None and denied is not None:
            denied()

    def failed(self) -> str | None:
        """Why a background check found that the credential no longer holds, if one did
        (an answer is read once)."""
        reason, self.reason = self.reason, None
        return reason

    def cancel(self) -> None:
        self.closed = True
        if self.passes is not None:
            self.passes.leave(self)
