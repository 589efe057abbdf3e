"""Markdown of completed answers rendered in a worker process, off the event loop.

Rendering a long answer (markdown, code highlighting, sanitizing) takes tens of ms of pure
Python; on the event loop that stalls every other session of the process, and at the end
of a burst of answers the stalls add up to the worst latencies the benchmark measured. The
run writer hands completed text to ``prerender`` first; the worker runs the same function
(``rendering.render_uncached``) and its result lands in the render cache, where the
fragment renderer finds it. Short texts are cheaper rendered in place; if the worker
fails, rendering simply happens in place, as before.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

from agent.ui import markdown as rendering

log = logging.getLogger(__name__)

OFFLOAD_CHARS = 2_000  # below this, a render costs less than the trip to the worker

_pool: ProcessPoolExecutor | None = None


def _get_pool() -> ProcessPoolExecutor:
    global _pool
    if _pool is None:
        # spawn: a fresh interpreter, not a fork of a process with threads and a loop.
        _pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    return _pool


def shutdown() -> None:
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)
        _pool = None


async def prerender(texts: list[str]) -> None:
    """Render these texts in the worker (those worth it and not cached yet) and cache them."""
    todo = [
        t for t in dict.fromkeys(texts)
        if OFFLOAD_CHARS <= len(t) <= rendering.MAX_MARKDOWN and not rendering.is_cached(t)
    ]  # fmt: skip
    if not todo:
        return
    loop = asyncio.get_running_loop()
    try:
        pool = _get_pool()
        done = await asyncio.gather(
            *(loop.run_in_executor(pool, rendering.render_uncached, t) for t in todo)
        )
    except Exception:  # a broken worker: start a new one next time, render in place now
        log.exception("the render worker failed; rendering in the server process")
        shutdown()
        return
    for text, html in zip(todo, done, strict=True):
        rendering.remember(text, html)
