"""Markdown of completed answers rendered in a worker process, off the event loop.

Rendering a long answer (markdown, code highlighting, sanitizing) takes tens of ms of pure
Python; on the event loop that stalls every other session of the process, and at the end
of a burst of answers the stalls add up to the worst latencies the benchmark measured. The
run writer hands completed text to ``prerender`` first; the worker runs the same function
(``rendering.render_uncached``) and its result lands in the render cache, where the
fragment renderer finds it. Short texts are cheaper rendered in place; if the worker
fails, rendering simply happens in place, as before. The worker exits by itself when the
server dies, however it dies (a SIGKILL or the OOM killer run no clean-up).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor

from agent.ui import highlight
from agent.ui import markdown as rendering

log = logging.getLogger(__name__)

OFFLOAD_CHARS = 2_000  # below this, a render costs less than the trip to the worker
PARENT_CHECK_INTERVAL = 0.5  # seconds between the worker's looks at its parent

_pool: ProcessPoolExecutor | None = None


def _exit_with_parent(parent: int) -> None:
    """In the worker: exit once the server that started it is gone. A worker waiting for
    work never notices by itself (it holds its task queue's pipe open at both ends), and
    PR_SET_PDEATHSIG would follow the thread that happened to start it, not the process;
    a dead parent shows as a new parent id (the worker is re-parented)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_INTERVAL)
        os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _get_pool() -> ProcessPoolExecutor:
    global _pool
    if _pool is None:
        # spawn: a fresh interpreter, not a fork of a process with threads and a loop.
        _pool = ProcessPoolExecutor(
            max_workers=1,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_exit_with_parent,
            initargs=(os.getpid(),),
        )
    return _pool


def shutdown() -> None:
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)
        _pool = None


async def _in_worker(fn, jobs: list[tuple], remember) -> None:
    """``fn(*job)`` for each job in the worker, each result handed to ``remember(*job, it)``;
    a broken worker is replaced next time and the caller's work happens in place now."""
    loop = asyncio.get_running_loop()
    try:
        pool = _get_pool()
        done = await asyncio.gather(*(loop.run_in_executor(pool, fn, *job) for job in jobs))
    except Exception:
        log.exception("the render worker failed; rendering in the server process")
        shutdown()
        return
    for job, result in zip(jobs, done, strict=True):
        remember(*job, result)


async def prerender(texts: list[str]) -> None:
    """Render these texts in the worker (those worth it and not cached yet) and cache them."""
    todo = [
        (t,) for t in dict.fromkeys(texts)
        if OFFLOAD_CHARS <= len(t) <= rendering.MAX_MARKDOWN and not rendering.is_cached(t)
    ]  # fmt: skip
    if todo:
        await _in_worker(rendering.render_uncached, todo, rendering.remember)


async def prehighlight(jobs: list[tuple[str, str]]) -> None:
    """Highlight these (text, file name) pairs in the worker (those worth it and not cached
    yet) and cache them, for the fragment renderer's tool cards."""
    todo = [
        job for job in dict.fromkeys(jobs)
        if len(job[0]) >= OFFLOAD_CHARS and highlight.needs_highlighting(*job)
    ]  # fmt: skip
    if todo:
        await _in_worker(highlight.highlight_uncached, todo, highlight.remember)
