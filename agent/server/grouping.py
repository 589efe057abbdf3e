"""Database work done in groups, on a thread of its own: the event log's batches, the
claims of prompts.

Items handed in while a group is being handled wait, and go together as the next group:
one trip to the thread and, in the handler, one transaction for all of them. Under a burst
of 100 prompts a claim each in the shared thread pool meant 100 transactions contending
for the database's write lock (SQLite's waiting writers sleep in growing steps) and, in
the pool's first-come order, every run's first event-log write queued behind all the
other prompts' claims. A group's thread is its own: its work never waits behind another
kind, and a slow group only delays its own kind.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from django.db import close_old_connections


def _in_thread(handle: Callable[[list], list], items: list) -> list:
    """As ``database_sync_to_async`` does: connections past their age or broken are closed
    before and after, so a long-lived thread never works on a dead one."""
    close_old_connections()
    try:
        return handle(items)
    finally:
        close_old_connections()


@dataclass
class _Waiting:
    item: Any
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Grouped:
    """``handle(items) -> results`` (one result per item, an exception for an item that
    failed alone) called in a thread of its own, for groups of the items ``submit`` gets
    while the previous group is handled. One per event loop (``for_loop``).
    ``observe``: told each group's duration in seconds (a metric)."""

    def __init__(self, name: str, handle: Callable[[list], list],
                 observe: Callable[[float], None] | None = None):  # fmt: skip
        self.name, self.handle, self.observe = name, handle, observe
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._pending: list[_Waiting] = []
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(
            self._forever(), context=contextvars.Context()
        )

    async def submit(self, item) -> Any:
        """The item's result once its group is handled (its exception raised)."""
        waiting = _Waiting(item)
        self._pending.append(waiting)
        self._wake.set()
        return await waiting.done

    async def _forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            group, self._pending = self._pending, []
            if not group:
                continue
            started = time.perf_counter()
            items = [waiting.item for waiting in group]
            try:
                results = await loop.run_in_executor(self._executor, _in_thread, self.handle, items)
            except Exception as exc:  # noqa: BLE001 - every item of the group learns it
                results = [exc] * len(group)
            if self.observe is not None:
                self.observe(time.perf_counter() - started)
            for waiting, result in zip(group, results, strict=True):
                if waiting.done.done():
                    continue  # its caller was cancelled while it waited
                if isinstance(result, BaseException):
                    waiting.done.set_exception(result)
                else:
                    waiting.done.set_result(result)

    def alive(self) -> bool:
        return not self._task.done()

    def close(self) -> None:
        self._task.cancel()
        self._executor.shutdown(wait=False)


_groups: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Grouped]] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def for_loop(name: str, handle: Callable[[list], list],
             observe: Callable[[float], None] | None = None) -> Grouped:  # fmt: skip
    """The running event loop's ``Grouped`` of this name, made on first use (again if its
    task ended: a test's loop closed, say)."""
    loop = asyncio.get_running_loop()
    with _lock:
        groups = _groups.setdefault(loop, {})
        grouped = groups.get(name)
        if grouped is None or not grouped.alive():
            if grouped is not None:
                grouped.close()
            grouped = groups[name] = Grouped(name, handle, observe)
    return grouped
