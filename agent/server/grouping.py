"""Database work done in groups, on threads of its own: the event log's batches, the
claims of prompts.

Items handed in while a group is being handled wait, and go together as the next group:
one trip to the thread and, in the handler, one transaction for all of them. Under a burst
of 100 prompts a claim each in the shared thread pool meant 100 transactions contending
for the database's write lock (SQLite's waiting writers sleep in growing steps) and, in
the pool's first-come order, every run's first event-log write queued behind all the
other prompts' claims. A kind's threads are its own: its work never waits behind another
kind's. With ``workers`` above one, a group may start while another is still handled (a
slow claim then holds up only the claims grouped with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from django.db import close_old_connections, connection, connections, transaction

log = logging.getLogger(__name__)


def _in_thread(handle: Callable[[list], list], items: list) -> list:
    """As ``database_sync_to_async`` does: connections past their age or broken are closed
    before and after, so a long-lived thread never works on a dead one. An exception that
    asyncio cannot hand to a future (``StopIteration``) comes back as a ``RuntimeError``."""
    close_old_connections()
    try:
        results = handle(items)
    except StopIteration as exc:
        raise RuntimeError(f"{handle.__qualname__} raised StopIteration") from exc
    finally:
        close_old_connections()
    return [RuntimeError("StopIteration") if isinstance(result, StopIteration) else result
            for result in results]  # fmt: skip


class _Turns:
    """SQLite has one writer. The grouped writers of a process (claims, the event log) take
    turns here, so the next starts the moment the last commits; left to SQLite, a waiting
    writer sleeps in its busy handler's growing steps (up to 100 ms each: under a burst of
    prompts, BEGIN IMMEDIATE waited 10-80 ms).

    When both kinds wait, they alternate: an urgent writer (the event log: runs already
    streaming wait for their events to be stored, a run's first deltas for its prompt's)
    goes before the claims of new prompts, which take the turn after it. First come, the
    two claim workers took turn after turn ahead of it: at 100 sessions the event log
    waited 0.2-0.5 s for each turn while the level's prompts were claimed."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._held = False
        self._last_urgent = False  # the last turn taken was an urgent one
        self._urgent = 0  # urgent writers waiting
        self._others = 0  # the other writers waiting

    def _may_go(self, urgent: bool) -> bool:
        if self._held:
            return False
        if urgent:
            return not (self._last_urgent and self._others)
        return self._last_urgent or not self._urgent

    @contextlib.contextmanager
    def turn(self, urgent: bool):
        with self._changed:
            self._urgent += urgent
            self._others += not urgent
            try:
                self._changed.wait_for(lambda: self._may_go(urgent))
            finally:
                self._urgent -= urgent
                self._others -= not urgent
            self._held, self._last_urgent = True, urgent
        try:
            yield
        finally:
            with self._changed:
                self._held = False
                self._changed.notify_all()


_sqlite_writer = _Turns()


def _one_writer(urgent: bool):
    if connection.vendor != "sqlite":
        return contextlib.nullcontext()
    return _sqlite_writer.turn(urgent)


def together_or_alone(items: list, together: Callable[[list], list],
                      alone: Callable[[Any], Any], what: str, *,
                      urgent: bool = False) -> list:  # fmt: skip
    """A handler's usual shape: ``together(items)`` in one transaction; if that fails, each
    item alone in a transaction of its own (``alone(item)``), so one item's failure is its
    own (its exception is its result); one item alone from the start is done again only
    when the database undid it for another transaction's sake (``UNDONE``). ``urgent``: on
    SQLite, its turn to write comes before the other writers' waiting (``_Turns``)."""
    with _one_writer(urgent):
        try:
            with transaction.atomic():
                return together(items)
        except Exception as exc:
            if len(items) == 1 and not _undone_by_the_database(exc):
                raise
            log.warning("a group of %d %s failed; handling them one by one", len(items), what)
        results = []
        for item in items:
            try:
                with transaction.atomic():
                    results.append(alone(item))
            except Exception as exc:  # noqa: BLE001 - handed to the item's own caller
                results.append(exc)
        return results


# A deadlock's victim, a serialization failure: the database undid the transaction for
# another's sake, and the same work done again may pass (PostgreSQL's documented advice).
UNDONE = frozenset({"40P01", "40001"})


def _undone_by_the_database(exc: Exception) -> bool:
    return getattr(exc.__cause__, "sqlstate", None) in UNDONE


@dataclass
class _Waiting:
    item: Any
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Grouped:
    """``handle(items) -> results`` (one result per item, an exception for an item that
    failed alone) called in a thread of its own, for groups of the items ``submit`` gets
    while earlier groups are handled. One per event loop (``for_loop``).
    ``observe``: told each group's duration in seconds (a metric). ``abandoned``: given
    (item, result) for an item whose caller was cancelled after its group had started
    (a claim then gives the conversation back). ``workers``: groups handled at once.
    ``most``: items in one group at most (the rest wait for the next)."""

    def __init__(self, name: str, handle: Callable[[list], list], *,
                 observe: Callable[[float], None] | None = None,
                 abandoned: Callable[[Any, Any], None] | None = None,
                 workers: int = 1, most: int | None = None):  # fmt: skip
        self.name, self.handle, self.observe, self.abandoned = name, handle, observe, abandoned
        self.loop = asyncio.get_running_loop()
        self.workers, self.most = workers, most
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix=name)
        self._slots = asyncio.Semaphore(workers)
        self._pending: list[_Waiting] = []
        self._wake = asyncio.Event()
        self._task = self.loop.create_task(self._forever(), context=contextvars.Context())

    async def submit(self, item) -> Any:
        """The item's result once its group is handled (its exception raised)."""
        waiting = _Waiting(item)
        self._pending.append(waiting)
        self._wake.set()
        return await waiting.done

    async def _forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._slots.acquire()
            # A caller cancelled before its group started is left out: its item is not done.
            live = [waiting for waiting in self._pending if not waiting.done.done()]
            group, self._pending = live[: self.most], live[self.most :]
            if self._pending:
                self._wake.set()
            if not group:
                self._slots.release()
                continue
            self.loop.create_task(self._handle(group), context=contextvars.Context())

    async def _handle(self, group: list[_Waiting]) -> None:
        started = time.perf_counter()
        try:
            items = [waiting.item for waiting in group]
            try:
                results = await self.loop.run_in_executor(
                    self._executor, _in_thread, self.handle, items
                )
                if len(results) != len(group):
                    raise RuntimeError(f"{self.name}: {len(results)} results for {len(group)}")
            except Exception as exc:  # noqa: BLE001 - every item of the group learns it
                results = [exc] * len(group)
            for waiting, result in zip(group, results, strict=True):
                self._resolve(waiting, result)
            if self.observe is not None:
                self.observe(time.perf_counter() - started)
        except BaseException as exc:
            # Never leave a caller waiting for good, whatever went wrong here.
            for waiting in group:
                if not waiting.done.done():
                    waiting.done.set_exception(RuntimeError(f"{self.name} failed: {exc!r}"))
            if not isinstance(exc, Exception):
                raise
            log.exception("%s: a group's results could not be handed back", self.name)
        finally:
            self._slots.release()

    def _resolve(self, waiting: _Waiting, result) -> None:
        if waiting.done.done():  # its caller was cancelled while the group was handled
            if self.abandoned is not None and not isinstance(result, BaseException):
                self.abandoned(waiting.item, result)
        elif isinstance(result, BaseException):
            waiting.done.set_exception(result)
        else:
            waiting.done.set_result(result)

    def alive(self) -> bool:
        return not self._task.done()

    def close(self) -> None:
        """Stop taking groups; the threads close their connections and end."""
        if not self.loop.is_closed():
            self._task.cancel()
        for _ in range(self.workers):
            self._executor.submit(connections.close_all)
        self._executor.shutdown(wait=False)


# Strong references, pruned of closed loops whenever a group is made: a task keeps its
# loop alive, so a weak table would never let go of one (a thread and a database
# connection per loop: tests and ``async_to_sync`` make many loops, a server one).
_groups: dict[asyncio.AbstractEventLoop, dict[str, Grouped]] = {}
_lock = threading.Lock()


def for_loop(name: str, handle: Callable[[list], list], **options) -> Grouped:
    """The running event loop's ``Grouped`` of this name, made on first use (again if its
    task ended); ``options`` as ``Grouped`` takes them."""
    loop = asyncio.get_running_loop()
    with _lock:
        groups = _groups.get(loop)
        grouped = groups.get(name) if groups is not None else None
        if grouped is not None and grouped.alive():
            return grouped
        for closed in [other for other in _groups if other.is_closed()]:
            for old in _groups.pop(closed).values():
                old.close()
        if grouped is not None:
            grouped.close()
        grouped = _groups.setdefault(loop, {})[name] = Grouped(name, handle, **options)
    return grouped
