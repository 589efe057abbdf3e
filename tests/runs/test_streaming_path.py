"""The streaming path's mechanisms (docs/PERFORMANCE.md): group-committed event-log
writes, one live-feed subscription per conversation and process, no per-message thread
hop."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from decimal import Decimal

import pytest

import agent.runs.eventlog as eventlog
from agent.core.events import from_dict
from agent.models import Conversation, Event, UsageDay, User
from agent.runs.broadcast import decode
from tests.conftest import REPO


def typed(events: list[dict]) -> list:
    """Events as the run layer hands them to the event log (typed; stored as their JSON)."""
    return [from_dict(event) for event in events]


def _delta(seq: int, text: str = "x") -> dict:
    return {"type": "text_delta", "seq": seq, "timestamp": 1, "content": text}


@pytest.fixture
def conversations(db):
    user = User.objects.create_user("writer", password="pw-writer-123")
    return [Conversation.objects.create(owner=user, model="m") for _ in range(12)]


@pytest.mark.django_db(transaction=True)
async def test_concurrent_batches_are_stored_in_few_transactions(conversations, monkeypatch):
    groups = []
    real = eventlog._store_all

    def recording(batches):
        groups.append(len(batches))
        return real(batches)

    monkeypatch.setattr(eventlog, "_store_all", recording)
    await asyncio.gather(*(
        eventlog.store(c.id, typed([_delta(1), _delta(2), _delta(3)])) for c in conversations
    ))  # fmt: skip
    assert sum(groups) == len(conversations)
    assert len(groups) < len(conversations)  # batches waiting together commit together
    for conversation in conversations:
        rows = await Event.objects.filter(conversation=conversation).acount()
        assert rows == 1  # consecutive deltas stored as one row
        await conversation.arefresh_from_db()
        assert conversation.last_seq == 3


@pytest.mark.django_db(transaction=True)
def test_partial_text_of_many_conversations_is_stored_in_one_insert_and_one_update(
    conversations,
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    batches = [eventlog.Batch(c.id, [_delta(5, "a"), _delta(6, "b")]) for c in conversations]
    with CaptureQueriesContext(connection) as queries:
        assert eventlog._store_all(batches) == [None] * len(conversations)
    # executemany is captured once ("12 times: UPDATE ..."), whatever the number of rows
    statements = [q["sql"].split(" times: ")[-1].split()[0] for q in queries]
    writes = [s for s in statements if s in ("INSERT", "UPDATE", "DELETE")]
    assert writes == ["INSERT", "UPDATE"], statements
    for conversation in conversations:
        (row,) = Event.objects.filter(conversation=conversation)
        assert (row.seq, row.payload["content"]) == (6, "ab")
        conversation.refresh_from_db()
        assert conversation.last_seq == 6


@pytest.mark.django_db(transaction=True)
def test_partial_text_never_moves_last_seq_back(conversations):
    ahead = conversations[0]
    Conversation.objects.filter(id=ahead.id).update(last_seq=10_005)  # e.g. after recovery
    batches = [eventlog.Batch(c.id, [_delta(7)]) for c in conversations[:3]]
    eventlog._store_all(batches)
    ahead.refresh_from_db()
    assert ahead.last_seq == 10_005
    conversations[1].refresh_from_db()
    assert conversations[1].last_seq == 7


@pytest.mark.django_db(transaction=True)
def test_a_conversation_with_two_batches_in_a_group_keeps_their_order(conversations):
    c = conversations[0]
    text = {"type": "text", "seq": 3, "timestamp": 1, "content": "xy"}
    eventlog._store_all([
        eventlog.Batch(c.id, [_delta(1, "x"), _delta(2, "y")]),
        eventlog.Batch(c.id, [text]),
    ])  # fmt: skip
    # the complete text replaced the partial row, as it does when stored on its own
    assert [(e.seq, e.type) for e in Event.objects.filter(conversation=c)] == [(3, "text")]


def _usage(seq: int, tokens: int, cost: float, context: int = 0) -> dict:
    return {"type": "usage", "seq": seq, "timestamp": 1_764_000_000_000, "input_tokens": tokens,
            "output_tokens": 2 * tokens, "cache_read_input_tokens": 3,
            "cache_creation_input_tokens": 0, "cost_usd": cost, "context_tokens": context,
            "context_window": 200_000 if context else 0}  # fmt: skip


def test_usage_totals_add_up_in_the_row_and_the_owners_day_and_come_back_for_the_meter(
    conversations,
):
    c = conversations[0]
    Conversation.objects.filter(id=c.id).update(input_tokens=100, cost_usd=Decimal("1.5"))
    (meter,) = eventlog._store_all([
        eventlog.Batch(c.id, [_usage(1, 10, 0.000125), _usage(2, 5, 0.25, context=900)]),
    ])  # fmt: skip
    # both usage events of the batch count (the row adds, it is not overwritten)
    assert (meter.input_tokens, meter.output_tokens, meter.cache_read_input_tokens) == (115, 30, 6)
    assert meter.cost_usd == Decimal("1.750125")
    assert (meter.context_tokens, meter.context_window, meter.last_seq) == (900, 200_000, 2)
    assert "history" in meter.get_deferred_fields()  # the meter never reads the history
    day = UsageDay.objects.get(user=c.owner)
    assert (day.input_tokens, day.output_tokens, day.cost_usd) == (15 + 6, 30, Decimal("0.250125"))
    assert eventlog._store_all([eventlog.Batch(c.id, [_delta(3)])]) == [None]


@pytest.mark.django_db(transaction=True)
async def test_a_failing_batch_fails_alone_and_its_group_is_still_stored(conversations):
    bad, *good = conversations[:4]
    await eventlog.store(
        bad.id, typed([{"type": "user", "seq": 1, "timestamp": 1, "content": "a"}])
    )
    results = await asyncio.gather(
        # seq 1 again: the unique (conversation, seq) constraint refuses it
        eventlog.store(bad.id, typed([{"type": "user", "seq": 1, "timestamp": 1, "content": "b"}])),
        *(eventlog.store(c.id, typed([_delta(1)])) for c in good),
        return_exceptions=True,
    )
    assert isinstance(results[0], Exception)
    assert results[1:] == [None] * len(good)
    for conversation in good:
        assert await Event.objects.filter(conversation=conversation).acount() == 1


@pytest.mark.django_db(transaction=True)
async def test_usage_batch_returns_the_updated_totals(conversations):
    usage = {
        "type": "usage", "seq": 1, "timestamp": 1, "input_tokens": 10, "output_tokens": 5,
        "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, "cost_usd": 0.5,
    }  # fmt: skip
    fresh = await eventlog.store(conversations[0].id, typed([usage]))
    assert fresh.input_tokens == 10 and fresh.output_tokens == 5
    assert await eventlog.store(conversations[0].id, typed([_delta(2)])) is None  # no re-read


async def test_group_send_reaches_every_member_in_order():
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    channels = [await layer.new_channel() for _ in range(3)]
    for channel in channels:
        await layer.group_add("conv.x", channel)
    for n in range(50):
        await layer.group_send("conv.x", {"type": "conversation.batch", "n": n})
    for channel in channels:
        got = [(await layer.receive(channel))["n"] for _ in range(50)]
        assert got == list(range(50))  # every message, in order
    await layer.flush()


async def test_each_batch_reaches_this_processs_receivers_before_broadcast_returns():
    """No trip through the event loop's queue between a run and this process's pages (under
    load each costs a turn of the loop: agent/runs/broadcast.py): a batch is handed to the
    receivers as it is written, each conversation's in the order written."""
    import uuid

    from agent.core.events import TextDeltaEvent
    from agent.runs.broadcast import broadcast, receive_here, stop_receiving

    handed: list[list[dict]] = []
    receive_here(handed.append)
    try:
        conversations = [uuid.uuid4() for _ in range(5)]
        for n in (1, 2):
            for c in conversations:
                await broadcast(c, [TextDeltaEvent(seq=n, content="x")], run=1)
                assert [(b["conversation"], b["seq_from"]) for b in handed[-1]] == [(str(c), n)]
        got = [(b["conversation"], b["seq_from"]) for batches in handed for b in batches]
        assert got == [(str(c), n) for n in (1, 2) for c in conversations]
    finally:
        stop_receiving(handed.append)


async def test_a_receiver_on_another_event_loop_gets_its_own_copy_through_that_loop():
    """Tests and ``async_to_sync`` run loops of their own in one process: a batch sent on
    one reaches the others' receivers, called on their own loop, as dicts of their own."""
    import threading
    import uuid

    from agent.core.events import TextDeltaEvent
    from agent.runs.broadcast import broadcast, flushed, receive_here, stop_receiving

    other = asyncio.new_event_loop()
    got = []
    done = asyncio.get_running_loop().create_future()
    here = asyncio.get_running_loop()

    def take(batches):
        got.append((threading.current_thread(), batches))
        here.call_soon_threadsafe(done.set_result, None)

    async def register():
        receive_here(take)

    thread = threading.Thread(target=other.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(register(), other).result(5)
        mine: list[list[dict]] = []
        receive_here(mine.append)
        conversation = uuid.uuid4()
        await broadcast(conversation, [TextDeltaEvent(seq=9, content="x")], run=9)
        await flushed()
        await asyncio.wait_for(done, 5)
        [(on, theirs)] = got
        assert on is thread
        assert theirs == mine[0] and theirs[0] is not mine[0][0]
    finally:
        stop_receiving(mine.append)
        stop_receiving(take)
        other.call_soon_threadsafe(other.stop)
        thread.join(5)
        other.close()


def _redis_layer():
    from channels_redis.pubsub import RedisPubSubChannelLayer

    from tests.services import REDIS_URL

    return RedisPubSubChannelLayer(hosts=[{"address": REDIS_URL, "socket_timeout": 30}])


async def test_with_redis_the_batches_reach_other_processes_through_the_layer_once(settings):
    """The batches written in one turn of the loop are one group message, named by its
    process: the other processes' receivers take it; this process's receiver, handed each
    batch directly, skips it on the layer."""
    import uuid

    from agent.core.events import TextDeltaEvent
    from agent.runs.broadcast import (
        LIVE_GROUP,
        broadcast,
        flushed,
        process_token,
        receive_here,
        stop_receiving,
    )
    from tests.services import REDIS_URL, require_redis

    require_redis()
    settings.CHANNEL_LAYERS = {"default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [{"address": REDIS_URL}]},
    }}  # fmt: skip
    other = _redis_layer()  # another process's connection
    handed: list[list[dict]] = []
    receive_here(handed.append)
    try:
        channel = await other.new_channel()
        await other.group_add(LIVE_GROUP, channel)
        await asyncio.gather(*(broadcast(uuid.uuid4(), [TextDeltaEvent(seq=n, content="x")],
                                         run=n) for n in (4, 5)))  # fmt: skip
        await flushed()
        message = await asyncio.wait_for(other.receive(channel), 5)
        assert message["origin"] == process_token()
        assert [b["seq_from"] for b in decode(message)] == [4, 5]
        assert [[b["seq_from"] for b in batches] for batches in handed] == [[4], [5]]
    finally:
        stop_receiving(handed.append)
        await other.flush()


async def test_a_receiver_takes_other_processes_batches_skips_its_own_and_survives_bad_ones(caplog):
    """On the layer, a receiver takes what other processes send and skips its own process's
    (handed to it directly). One malformed message on the live group (another version's,
    during a deploy) must not end it: every page here would stop getting frames."""
    import json
    import uuid

    from agent.runs.broadcast import LIVE_GROUP, process_token
    from agent.web import dispatch
    from tests.services import require_redis

    require_redis()
    layer = _redis_layer()
    receiver = dispatch.Dispatcher(layer)
    await receiver.start()
    conversation = str(uuid.uuid4())
    got = asyncio.Queue()

    receiver.add(conversation, lambda batch: got.put_nowait(batch["seq_from"]))

    def message(seq: int, origin: str) -> dict:
        batch = {"conversation": conversation, "seq_from": seq}
        return {"type": "live.batches", "origin": origin, "batches": json.dumps([batch])}

    try:
        await layer.group_send(LIVE_GROUP, {"type": "live.batches", "batches": [{"x": 1}]})
        await layer.group_send(LIVE_GROUP, {"type": "live.batches", "batches": "not json"})
        await layer.group_send(LIVE_GROUP, message(6, process_token()))  # its own: skipped
        await layer.group_send(LIVE_GROUP, message(7, "another process"))
        assert await asyncio.wait_for(got.get(), 5) == 7
        assert got.empty()
    finally:
        await receiver.leave()
        for task in receiver.tasks:
            task.cancel()
        await layer.flush()
    assert caplog.text.count("a live message could not be read") == 2


def test_the_embedded_default_layer_is_channels_own_configured(settings):
    layer = settings.CHANNEL_LAYERS["default"]
    assert layer["BACKEND"] == "channels.layers.InMemoryChannelLayer"
    assert layer["CONFIG"]["capacity"] >= 1000  # a burst's frames fit a feed's queue


async def test_long_answers_are_rendered_by_the_worker_and_cached(monkeypatch):
    from agent.ui import markdown as rendering
    from agent.ui import render_pool

    text = "## Result\n\n" + "\n".join(f"- item **{i}** <script>x</script>" for i in range(300))
    expected = rendering.render_uncached(text)

    def not_here(text):
        raise AssertionError("rendered on the event loop")

    await render_pool.prerender([text])
    monkeypatch.setattr(rendering, "render_uncached", not_here)
    html = rendering.render_markdown(text)
    assert html == expected and "<script>" not in html and "<strong>299</strong>" in html


async def test_a_broken_worker_falls_back_to_rendering_in_place(monkeypatch):
    from agent.ui import markdown as rendering
    from agent.ui import render_pool

    def broken():
        raise OSError("no process for you")

    monkeypatch.setattr(render_pool, "_get_pool", broken)
    text = "fallback " * 400
    await render_pool.prerender([text])  # no exception: the render happens later, here
    assert not rendering.is_cached(text)
    assert "fallback" in rendering.render_markdown(text)


def test_the_server_moves_its_startup_objects_out_of_the_collectors_way():
    code = "import gc, harness_site.asgi; print(gc.get_freeze_count())"
    env = {**os.environ, "DJANGO_DEBUG": "1"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) > 100_000  # Django, Channels and the SDK, frozen


def test_the_render_worker_exits_when_the_server_is_killed():
    """A SIGKILLed (or OOM-killed) server runs no clean-up: its render worker must still go,
    not live on as an orphan."""
    code = (
        "import asyncio, os, sys\n"
        "from agent.ui import render_pool\n"
        "asyncio.run(render_pool.prerender(['# long\\n\\n' + 'word ' * 2000]))\n"
        "print(*render_pool._pool._processes, flush=True)\n"
        "sys.stdin.read()\n"  # the server lives on, until it is killed
    )
    server = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        workers = [int(pid) for pid in server.stdout.readline().split()]
        assert workers, "the render worker did not start"
        assert all(_alive(pid) for pid in workers)
        server.kill()
        server.wait()
        deadline = time.monotonic() + 5
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in workers), "the render worker outlived the server"
    finally:
        server.kill()
        server.wait()


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for its (new) parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_an_event_streams_full_queue_drops_what_comes_as_its_channel_did(
    settings, conversations
):
    """An event stream that reads slower than batches come holds at most the layer's
    capacity of them, as its channel did (its feed then fills the gap from the log)."""
    from agent.web import dispatch
    from agent.web.feed import ChannelInbox

    settings.LAYER_CAPACITY = 2
    conversation = conversations[0]
    inbox = ChannelInbox(conversation.id, [])
    await inbox.open()
    try:
        receiver = await dispatch.dispatcher()
        for seq in range(1, 6):
            receiver.hand_out([{"type": "conversation.batch", "conversation": str(conversation.id),
                                "seq_from": seq}])  # fmt: skip
        switch = {"type": "conversation.branch", "conversation": str(conversation.id)}
        receiver.hand_out([switch])  # never dropped
        got = [await inbox.get(1) for _ in range(3)]
        assert [m.get("seq_from") for m in got] == [1, 2, None] and got[2] == switch
        assert await inbox.get(0.01) is None  # 3 to 5 were dropped, not queued
    finally:
        await inbox.close()


class _UnreachableLayer:
    """A layer across processes (Redis) whose joins fail while ``down`` names the group."""

    def __init__(self, down: set[str], delay: float = 0) -> None:
        self.down, self.groups, self.made, self.delay, self.joins = down, {}, 0, delay, 0

    async def new_channel(self) -> str:
        self.made += 1
        return f"channel.{self.made}"

    async def group_add(self, group: str, channel: str) -> None:
        self.joins += 1
        await asyncio.sleep(self.delay)
        if group in self.down:
            raise ConnectionError("the layer is unreachable")
        self.groups.setdefault(group, set()).add(channel)

    async def group_discard(self, group: str, channel: str) -> None:
        self.groups.get(group, set()).discard(channel)

    async def receive(self, channel: str) -> dict:
        await asyncio.Event().wait()  # nothing comes
        raise AssertionError


async def test_a_receiver_whose_start_failed_joins_the_live_group_at_the_next_start():
    """Redis unreachable when the process's first socket connected: the next connect joins
    the live group (other processes' batches reach this one again), and this process's own
    batches are handed to its listeners once, not once per start."""
    import uuid

    from agent.core.events import TextDeltaEvent
    from agent.runs.broadcast import LIVE_GROUP, broadcast
    from agent.web import dispatch

    layer = _UnreachableLayer(down={LIVE_GROUP})
    receiver = dispatch.Dispatcher(layer)
    with pytest.raises(ConnectionError):
        await receiver.start()
    layer.down.clear()
    try:
        await receiver.start()
        assert layer.groups[LIVE_GROUP] == {receiver.channel}
        conversation, got = uuid.uuid4(), []
        receiver.add(conversation, got.append)
        await broadcast(conversation, [TextDeltaEvent(seq=1, content="x")], run=1)
        assert [batch["seq_from"] for batch in got] == [1]
    finally:
        await receiver.leave()
        for task in receiver.tasks:
            task.cancel()


async def test_sockets_connecting_while_the_receiver_starts_share_its_one_attempt():
    """Redis unreachable (each try timing out) while many sockets connect at once: they wait
    for one try and share its failure, not for one try each in turn."""
    from agent.runs.broadcast import LIVE_GROUP
    from agent.web import dispatch

    layer = _UnreachableLayer(down={LIVE_GROUP}, delay=0.05)
    receiver = dispatch.Dispatcher(layer)
    started = time.monotonic()
    outcomes = await asyncio.gather(*(receiver.start() for _ in range(5)),
                                    return_exceptions=True)  # fmt: skip
    assert all(isinstance(outcome, ConnectionError) for outcome in outcomes)
    assert layer.joins == 1 and time.monotonic() - started < 0.2
    layer.down.clear()
    try:
        await asyncio.gather(*(receiver.start() for _ in range(5)))
        assert layer.joins == 2 and layer.groups[LIVE_GROUP] == {receiver.channel}
    finally:
        await receiver.leave()
        for task in receiver.tasks:
            task.cancel()


async def test_an_event_stream_whose_opening_fails_leaves_its_groups_and_stops_reading(
    conversations, monkeypatch
):
    """A stream whose opening fails part way (the layer unreachable) keeps no membership of
    the groups it joined and no task reading its channel."""
    from agent.web import dispatch
    from agent.web.feed import ChannelInbox

    async def unreachable():
        raise ConnectionError("the layer is unreachable")

    monkeypatch.setattr(dispatch, "dispatcher", unreachable)
    inbox = ChannelInbox(conversations[0].id, ["user.1"])
    inbox.layer = layer = _UnreachableLayer(down=set())
    with pytest.raises(ConnectionError):
        await inbox.open()
    await asyncio.sleep(0)
    assert all(not members for members in layer.groups.values()) and len(layer.groups) == 2
    assert inbox.reading.done()
