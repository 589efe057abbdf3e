"""Frame pacing adapts to the process's event-loop lag (agent/runs/pacing.py)."""

from __future__ import annotations

import asyncio
import time

from agent.runs.pacing import LAG_FLOOR, MAX_INTERVAL, MIN_INTERVAL, TICK, LoopLag
from agent.server.metrics import Gauge


def test_an_unloaded_loop_paces_frames_at_the_shortest_interval():
    lag = LoopLag()
    assert lag.interval() == MIN_INTERVAL


def test_lag_under_the_floor_does_not_hold_frames_back():
    """A sleeping timer wakes a little late even on an idle loop (its slack, about a
    millisecond): frames spaced by that would make every delta of a 50/s stream wait."""
    lag = LoopLag()
    for _ in range(50):
        lag.observe(LAG_FLOOR * 0.9)
    assert lag.interval() == MIN_INTERVAL
    for _ in range(50):
        lag.observe(LAG_FLOOR * 3)
    assert lag.interval() > MIN_INTERVAL


def test_lag_rises_quickly_and_falls_slowly():
    lag = LoopLag()
    lag.observe(0.1)
    risen = lag.lag
    assert risen >= 0.05  # one late sample is felt at once
    lag.observe(0.0)
    assert risen * 0.9 <= lag.lag < risen  # one prompt sample does not undo it
    for _ in range(200):
        lag.observe(0.0)
    assert lag.lag < 0.001


def test_the_interval_is_capped():
    lag = LoopLag()
    for _ in range(20):
        lag.observe(10.0)
    assert lag.interval() == MAX_INTERVAL


async def test_a_blocked_event_loop_widens_the_interval_and_the_last_release_resets_it():
    lag = LoopLag()
    lag.acquire()
    lag.acquire()
    await asyncio.sleep(TICK * 2)  # the sampler runs
    for _ in range(5):
        time.sleep(0.06)  # the loop is busy: the sampler wakes late
        await asyncio.sleep(0)
        await asyncio.sleep(TICK)
    assert lag.interval() > MIN_INTERVAL * 2
    lag.release()
    assert lag.lag > 0  # another run still streams
    lag.release()
    assert lag.lag == 0 and lag.interval() == MIN_INTERVAL


async def test_the_smoothed_lag_is_published_on_the_gauge_and_cleared_when_nothing_streams():
    gauge = Gauge("lag_seconds", "test")
    lag = LoopLag(gauge)
    lag.acquire()
    await asyncio.sleep(TICK * 2)
    for _ in range(3):
        time.sleep(0.06)  # the loop is busy: the sampler wakes late
        await asyncio.sleep(0)
        await asyncio.sleep(TICK)
    assert gauge.values[None] == lag.lag > 0.01
    lag.release()
    assert gauge.values[None] == 0.0


def test_streams_store_their_partial_text_on_the_ticks_they_share():
    """Partial text is stored on the first frame after each tick of its phase's clock,
    whatever the stream's own timing: the streams of a phase reach the event log together
    (few group commits), each stream still saves about once a second, and a stream's first
    frame is stored at once."""
    from agent.runs.pacing import PARTIAL_SAVE_INTERVAL as PERIOD
    from agent.runs.pacing import partial_save_due

    assert partial_save_due(0.0, 1000.3 * PERIOD)  # nothing saved yet: at once
    # Two streams that last saved at different phases of the same tick...
    early, late = 1000.05 * PERIOD, 1000.95 * PERIOD
    for now in (1000.5 * PERIOD, 1000.99 * PERIOD):
        assert not partial_save_due(early, now) and not partial_save_due(late, now)
    # ...are both due from the next tick on, not each a tick after its own save.
    assert partial_save_due(early, 1001.01 * PERIOD) and partial_save_due(late, 1001.01 * PERIOD)
    # At most once a tick: saved just after the tick, the next is due at the one after.
    assert not partial_save_due(1001.02 * PERIOD, 1001.98 * PERIOD)
    assert partial_save_due(1001.02 * PERIOD, 1002.0 * PERIOD)


def test_the_streams_save_ticks_are_spread_over_the_second_in_a_few_phases():
    """Conversations fall in SAVE_PHASES phases: those of one phase save on the same ticks
    (one group commit), the phases' ticks are spread over the period (no one burst of every
    stream's save), and each conversation's tick comes once a period."""
    import uuid

    from agent.runs.pacing import PARTIAL_SAVE_INTERVAL as PERIOD
    from agent.runs.pacing import SAVE_PHASES, partial_save_due, save_phase

    ids = [uuid.uuid4() for _ in range(400)]
    phases = {save_phase(i) for i in ids}
    assert len(phases) == SAVE_PHASES > 1
    assert all(0 <= p < PERIOD for p in phases)

    def first_tick_after(last_save: float, phase: float) -> float:
        """The first moment, in steps of 1/1000 period, at which a save is due again."""
        step, k = PERIOD / 1000, 0
        while not partial_save_due(last_save, last_save + k * step, phase):
            k += 1
        return round((last_save + k * step) % PERIOD, 2)

    # Two streams of one phase that saved at different moments are due at the same tick;
    # each phase's tick is its own, and it comes within a period of the last save.
    for phase in phases:
        ticks = {first_tick_after(1000.02 * PERIOD + phase, phase),
                 first_tick_after(1000.97 * PERIOD + phase, phase)}  # fmt: skip
        assert ticks == {round(phase % PERIOD, 2)}
    ticks = {first_tick_after(1000.5 * PERIOD, phase) for phase in phases}
    assert len(ticks) == SAVE_PHASES
