"""Does a long answer get slower to stream as it grows? (The anchors re-parse the whole
message as markdown on every token, so their cost per token grows with the answer.)

A 20,000-token answer streams from the benchmark's model through the real SDK and the real
agent loop; every frame (3 deltas, as at 50 tokens/s with 50 ms frames) goes through what
the run writer does with it: the event dicts, the stored form of the partial text and the
rendered fragment. The CPU time of the first 1,000 tokens is compared with the last 1,000.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

DELTAS_PER_FRAME = 3
FRAMES_PER_SAVE = 20  # the writer stores partial text once a second: 20 frames


class _Writer:
    """The per-frame work of ``agent.runs.run.Run._write``, without the database and sockets,
    timed with this thread's CPU clock at each 1,000-delta mark."""

    def __init__(self) -> None:
        from agent.ui.fragments import FragmentRenderer

        self.renderer = FragmentRenderer()
        self.pending: list[Any] = []
        self.unsaved: list[Any] = []
        self.frames = 0
        self.deltas = 0
        self.render_s = 0.0
        self.marks: dict[int, tuple[float, float]] = {0: (time.thread_time(), 0.0)}
        self.final_s = 0.0

    def emit(self, event: Any) -> None:
        self.pending.append(event)
        if event.type == "text_delta":
            self.deltas += 1
            if len(self.pending) >= DELTAS_PER_FRAME:
                self.flush()
            if self.deltas % 1000 == 0:
                self.marks[self.deltas] = (time.thread_time(), self.render_s)
        elif event.type == "text":
            started = time.thread_time()
            self.flush()
            self.final_s = time.thread_time() - started

    def flush(self) -> None:
        from agent.runs.eventlog import stored_form

        started = time.thread_time()
        batch, self.pending = self.pending, []
        self.frames += 1
        self.unsaved += batch
        if self.frames % FRAMES_PER_SAVE == 0:  # the event log's edge: JSON, deltas joined
            stored_form([event.to_dict() for event in self.unsaved])
            self.unsaved = []
        self.renderer.render(batch, None)
        [event.to_dict() for event in batch]  # the broadcast's edge: the frame's JSON
        self.render_s += time.thread_time() - started

    def window(self, start: int) -> dict[str, float]:
        (cpu0, render0), (cpu1, render1) = self.marks[start], self.marks[start + 1000]
        return {"pipeline_ms": (cpu1 - cpu0) * 1000, "render_ms": (render1 - render0) * 1000}


async def _stream_once(base_url: str, tokens: int) -> _Writer:
    from agent.core.config import Config
    from agent.core.loop import AgentLoop
    from agent.core.model.client import make_provider

    config = Config(api_key="bench", base_url=base_url, max_turns=1)
    writer = _Writer()
    provider = make_provider(config)
    harness = AgentLoop(provider, [], config, writer.emit)
    await harness.prompt("bench: a long answer")
    await provider.close()
    if writer.deltas != tokens:
        raise RuntimeError(f"expected {tokens} deltas, saw {writer.deltas}")
    return writer


def measure(base_url: str, tokens: int, repeats: int = 3) -> dict:
    """Median over ``repeats`` streams of the first and last 1,000 tokens' CPU time (after
    one untimed stream: imports and first-use caches are not the answer's cost)."""
    asyncio.run(_stream_once(base_url, tokens))
    runs = [asyncio.run(_stream_once(base_url, tokens)) for _ in range(repeats)]

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    first = [w.window(0) for w in runs]
    last = [w.window(tokens - 1000) for w in runs]
    result = {
        "tokens": tokens,
        "repeats": repeats,
        "first_1k_pipeline_ms": round(median([w["pipeline_ms"] for w in first]), 2),
        "last_1k_pipeline_ms": round(median([w["pipeline_ms"] for w in last]), 2),
        "first_1k_render_ms": round(median([w["render_ms"] for w in first]), 2),
        "last_1k_render_ms": round(median([w["render_ms"] for w in last]), 2),
        "final_markdown_ms": round(median([w.final_s * 1000 for w in runs]), 2),
    }
    result["ratio"] = round(result["last_1k_pipeline_ms"] / result["first_1k_pipeline_ms"], 3)
    result["render_ratio"] = round(result["last_1k_render_ms"] / result["first_1k_render_ms"], 3)
    return result
