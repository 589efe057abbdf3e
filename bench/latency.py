"""Readers of stamped streams: the SDK alone (the baseline) and browser sessions of the
product (WebSocket), each recording, per delta, the time from its stamp to its arrival."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field

from .upstream import STAMP

STARTS_SETTLE = 1.0  # seconds after the last prompt of a level is sent: its start is done

# A batch that completes the block carries the rendered answer (every stamp again) after
# this marker; only what precedes it is live text.
END_OF_LIVE_TEXT = "delete:#live-text"
FINISHED = ('data-state="idle"', 'data-state="error"')


@dataclass
class Sample:
    """Latencies (ms) of the deltas seen, and how many of the expected ones were seen."""

    expected: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    # Per stream: from sending the prompt (or the SDK's request) to its first token's arrival
    first_token_ms: list[float] = field(default_factory=list)
    frames: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # Deltas stamped from this time (ns) on: once every prompt of the level has started
    # and the starts' work is done (None: not kept apart)
    steady_from_ns: int | None = None
    steady_ms: list[float] = field(default_factory=list)

    @property
    def delivered(self) -> int:
        return len(self.latencies_ms)

    def percentile(self, p: float, values: list[float] | None = None) -> float | None:
        values = self.latencies_ms if values is None else values
        if not values:
            return None
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

    def summary(self) -> dict:
        return {
            "p50_ms": _round(self.percentile(50)),
            "p99_ms": _round(self.percentile(99)),
            "max_ms": _round(max(self.latencies_ms, default=None)),
            "mean_ms": _round(statistics.fmean(self.latencies_ms) if self.latencies_ms else None),
            "first_token_p50_ms": _round(self.percentile(50, self.first_token_ms)),
            "first_token_p99_ms": _round(self.percentile(99, self.first_token_ms)),
            "steady_p99_ms": _round(self.percentile(99, self.steady_ms)),
            "delivered": self.delivered,
            "expected": self.expected,
            "frames": self.frames,
            "seconds": round(self.seconds, 2),
            "errors": self.errors[:5],
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


class _Seen:
    """One stream's deltas: first sighting of each index counts, repeats do not."""

    def __init__(self, sample: Sample):
        self.sample, self.indexes = sample, set()
        self.started_ns = time.time_ns()  # set again when the prompt is sent

    def text(self, text: str, arrived_ns: int) -> None:
        first = not self.indexes
        for match in STAMP.finditer(text):
            index = int(match[1])
            if index not in self.indexes:
                self.indexes.add(index)
                stamped = int(match[2])
                self.sample.latencies_ms.append((arrived_ns - stamped) / 1e6)
                steady = self.sample.steady_from_ns
                if steady is not None and stamped >= steady:
                    self.sample.steady_ms.append((arrived_ns - stamped) / 1e6)
        if first and self.indexes:
            self.sample.first_token_ms.append((arrived_ns - self.started_ns) / 1e6)


async def sdk_streams(base_url: str, sessions: int, tokens: int, spread: float) -> Sample:
    """The physical limit: the same streams read directly by ``AsyncAnthropic``, built as
    the product builds it (same HTTP transport), iterated as the SDK's own event objects
    (the product reads the body itself, more cheaply: agent/core/model/wire.py); started over
    ``spread`` seconds."""
    from agent.core.config import Config
    from agent.core.model.client import make_client

    sample = Sample(expected=sessions * tokens, steady_from_ns=_steady_from(spread))
    client = make_client(Config(api_key="bench", base_url=base_url))

    async def one(i: int) -> None:
        await asyncio.sleep(spread * i / sessions)
        seen = _Seen(sample)
        seen.started_ns = time.time_ns()
        stream = await client.messages.create(
            model="claude-haiku-4-5",
            max_tokens=4096,
            messages=[{"role": "user", "content": "bench"}],
            stream=True,
        )
        async for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                seen.text(event.delta.text, time.time_ns())

    started = time.monotonic()
    await _gather(sample, [one(i) for i in range(sessions)])
    sample.seconds = time.monotonic() - started
    await client.close()
    return sample


async def open_sessions(sessions: list[dict]) -> list:
    """Signed-in WebSocket sessions on each conversation (on its server, ``base``), as
    the page opens them."""
    from websockets.asyncio.client import connect

    async def one(s: dict):
        ws_base = s["base"].replace("http://", "ws://")
        return await connect(
            f"{ws_base}/ws/c/{s['conversation']}/",
            origin=s["base"],
            open_timeout=60,
            max_size=None,
            additional_headers={"Cookie": f"sessionid={s['session']}"},
        )

    opened = []
    for start in range(0, len(sessions), 50):  # a burst of handshakes, not a stampede
        opened += await asyncio.gather(*(one(s) for s in sessions[start : start + 50]))
    return opened


def _steady_from(spread: float) -> int:
    """Deltas stamped from then on count as steady streaming: every prompt of the level has
    been sent (over ``spread`` seconds) and had time to start."""
    return time.time_ns() + int((spread + STARTS_SETTLE) * 1e9)


async def product_streams(sockets: list, tokens: int, spread: float) -> Sample:
    """Send one prompt on each open session (started over ``spread`` seconds) and read the
    live frames until the run's final status."""
    sample = Sample(expected=len(sockets) * tokens, steady_from_ns=_steady_from(spread))

    async def one(i: int, ws) -> None:
        await asyncio.sleep(spread * i / len(sockets))
        seen = _Seen(sample)
        seen.started_ns = time.time_ns()
        await ws.send(json.dumps({"content": "bench"}))
        while True:
            frame = await asyncio.wait_for(ws.recv(), timeout=60)
            arrived = time.time_ns()
            sample.frames += 1
            seen.text(frame.partition(END_OF_LIVE_TEXT)[0], arrived)
            if 'data-part="error"' in frame or 'data-outcome="refused"' in frame:
                sample.errors.append(frame[:300])
            if any(marker in frame for marker in FINISHED):
                return

    started = time.monotonic()
    await _gather(sample, [one(i, ws) for i, ws in enumerate(sockets)])
    sample.seconds = time.monotonic() - started
    return sample


async def _gather(sample: Sample, coroutines: list) -> None:
    for result in await asyncio.gather(*coroutines, return_exceptions=True):
        if isinstance(result, BaseException):
            sample.errors.append(f"{type(result).__name__}: {result}")


async def sdk_first_tokens(base_url: str, streams: int, at_once: bool) -> list[float]:
    """Request → first token (ms) read by the SDK alone: ``streams`` requests one after
    another, or all at once; each closed after its first token."""
    from agent.core.config import Config
    from agent.core.model.client import make_client

    client = make_client(Config(api_key="bench", base_url=base_url))

    async def one() -> float:
        started = time.time_ns()
        stream = await client.messages.create(
            model="claude-haiku-4-5",
            max_tokens=4096,
            messages=[{"role": "user", "content": "bench"}],
            stream=True,
        )
        try:
            async for event in stream:
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    return (time.time_ns() - started) / 1e6
        finally:
            await stream.close()
        raise RuntimeError("the stream ended without a token")

    try:
        if at_once:
            return list(await asyncio.gather(*(one() for _ in range(streams))))
        return [await one() for _ in range(streams)]
    finally:
        await client.close()


async def product_first_tokens(sockets: list, at_once: bool) -> list[float]:
    """Enter → first visible token (ms) on each open session: a prompt sent, its first
    stamped token read, the run cancelled and its end awaited; one session after another,
    or all at once (a burst of prompts)."""

    async def one(ws) -> float:
        started = time.time_ns()
        await ws.send(json.dumps({"content": "bench"}))
        first = None
        while True:
            frame = await asyncio.wait_for(ws.recv(), timeout=60)
            arrived = time.time_ns()
            if first is None and STAMP.search(frame.partition(END_OF_LIVE_TEXT)[0]):
                first = (arrived - started) / 1e6
                await ws.send(json.dumps({"action": "cancel"}))
            if any(marker in frame for marker in FINISHED):
                if first is None:
                    raise RuntimeError(f"the run ended without a token: {frame[:1000]}")
                return first

    if at_once:
        return list(await asyncio.gather(*(one(ws) for ws in sockets)))
    return [await one(ws) for ws in sockets]
