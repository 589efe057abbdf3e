"""How often a run sends frames of text deltas (adaptive to how busy this process is), and
when it stores their partial text.

A frame costs the same whether it carries one delta or ten (rendering it, a channel-layer
message, a socket write per viewer), so frames are coalesced; but every millisecond a delta
waits for its frame is latency the reader sees. An idle process sends a delta at once when
the conversation's last frame of text is older than the interval, and the interval is
short. A busy process (many streams) spaces frames out by how late its event loop runs —
the measured lag, not a fixed frame budget: fewer, bigger frames then cost less CPU per
delta, which is what brings the lag back down.

The lag is sampled by one task per process sleeping a fixed tick and measuring how late it
wakes; a smoothed value (quick to rise, slow to fall, so bursts are caught and frames do
not flap) sets the interval. Lag under a floor counts for nothing: a timer wakes about a
millisecond late on an idle loop, and at 50 deltas a second every millisecond added to
the interval past their 20 ms spacing is one more that each delta waits.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from agent.server import metrics

MIN_INTERVAL = 0.015  # seconds: an idle process; under one delta's spacing at 50 deltas/s
MAX_INTERVAL = 0.25  # a process far behind still shows text four times a second
LAG_FACTOR = 3.0  # interval = MIN_INTERVAL + LAG_FACTOR × (smoothed lag - LAG_FLOOR)
LAG_FLOOR = 0.005  # lag no frame waits for: a timer's slack, a short burst of work
TICK = 0.02  # the sampler's sleep
RISE, FALL = 0.5, 0.05  # smoothing weights of a sample above / below the current value


class LoopLag:
    """The event loop's smoothed lag (seconds), sampled while anything streams; ``gauge``
    (the process's: ``/metrics``) shows it too, so an operator sees text being coalesced."""

    def __init__(self, gauge: metrics.Gauge | None = None) -> None:
        self.lag = 0.0
        self.gauge = gauge
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._users = 0

    def observe(self, sample: float) -> None:
        weight = RISE if sample > self.lag else FALL
        self._set(self.lag + weight * (sample - self.lag))

    def _set(self, lag: float) -> None:
        self.lag = lag
        if self.gauge is not None:
            self.gauge.set(lag)

    def interval(self) -> float:
        return min(MAX_INTERVAL, MIN_INTERVAL + LAG_FACTOR * max(0.0, self.lag - LAG_FLOOR))

    def acquire(self) -> None:
        """A run starts streaming: sample while at least one does (an idle process does
        not wake 50 times a second for nothing)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # (a new loop: tests run one per test)
            self._loop, self._task, self._users = loop, None, 0
            self._set(0.0)
        self._users += 1
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._sample())

    def release(self) -> None:
        self._users = max(0, self._users - 1)
        if self._users == 0 and self._task is not None:
            self._task.cancel()
            self._task = None
            self._set(0.0)

    async def _sample(self) -> None:
        while True:
            started = time.monotonic()
            await asyncio.sleep(TICK)
            self.observe(max(0.0, time.monotonic() - started - TICK))


loop_lag = LoopLag(metrics.LOOP_LAG)

# Frames of text deltas alone are sent at once and stored in the background on the first
# frame after each tick of this period (everything else is stored before it is sent): a
# crash loses about a second of partial text, and a stream costs one write a second
# instead of twenty.
PARTIAL_SAVE_INTERVAL = 1.0
# The streams' ticks fall in this many phases of the period, a stream's phase set by its
# conversation: each phase's saves reach the event log together (one group commit), and
# the phases spread that work over the second.
SAVE_PHASES = 10


def save_phase(conversation_id: uuid.UUID) -> float:
    """The offset (seconds) of a conversation's save ticks within the period."""
    return (conversation_id.int % SAVE_PHASES) * PARTIAL_SAVE_INTERVAL / SAVE_PHASES


def partial_save_due(last_save: float, now: float, phase: float = 0.0) -> bool:
    """Whether a stream stores its unsaved deltas now (``time.monotonic()`` values): on the
    first frame after each tick of its phase's clock, not a second after its own last save.

    Streams of one phase then store together, in one group commit: at 100 streams, one
    save timer per stream made about 40 commits a second of two or three batches each (the
    event log's thread 13% of a core). One clock for all made one commit of 100 batches a
    second, and in the 400 ms after it the event loop ran twice as late as in the rest of
    the second. Ten phases make ten commits of about ten batches (docs/PERFORMANCE.md)."""
    period = PARTIAL_SAVE_INTERVAL
    return (now - phase) // period != (last_save - phase) // period
