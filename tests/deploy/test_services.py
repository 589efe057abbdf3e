"""PostgreSQL (DATABASE_URL) and Redis (REDIS_URL) as a deployment uses them.

Skipped with a reason when the services are not running, unless HARNESS_REQUIRE_SERVICES=1
(CI), where their absence fails."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid

import pytest

from tests.conftest import REPO, require_service
from tests.services import REDIS_URL, fresh_pg_database, require_redis


@pytest.fixture
def pg_database():
    with fresh_pg_database() as url:
        yield url


def _django(code: str, **env_extra) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update({"DJANGO_DEBUG": "1", "DJANGO_SETTINGS_MODULE": "harness_site.settings"})
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_postgres_database_url_migrates_and_serves_healthz(pg_database):
    code = (
        "import django; django.setup()\n"
        "from django.core.management import call_command\n"
        "from django.db import connection\n"
        "call_command('migrate', verbosity=0)\n"
        "from django.test import Client\n"
        "r = Client(HTTP_HOST='localhost').get('/healthz')\n"
        "print(connection.vendor, r.status_code, r.json()['database'])\n"
        "from agent.models import User\n"
        "u = User.objects.create_user('pg-user', password='x'); u.remember_prompt('hi'); u.save()\n"
        "print(User.objects.get(username='pg-user').prompt_history)\n"
    )
    proc = _django(code, DATABASE_URL=pg_database)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["postgresql 200 ok", "['hi']"]


def test_postgres_stores_a_group_of_partial_texts(pg_database):
    """The event log's grouped statements (raw executemany) on PostgreSQL's types."""
    code = (
        "import django; django.setup()\n"
        "from django.core.management import call_command\n"
        "call_command('migrate', verbosity=0)\n"
        "from agent.runs import eventlog\n"
        "from agent.models import Conversation, Event, User\n"
        "u = User.objects.create_user('pg-writer', password='x')\n"
        "cs = [Conversation.objects.create(owner=u, model='m') for _ in range(3)]\n"
        "d = lambda seq: {'type': 'text_delta', 'seq': seq, 'timestamp': 1, 'content': 'z'}\n"
        "print(eventlog._store_all([eventlog.Batch(c.id, [d(1), d(2)]) for c in cs]))\n"
        "print(sorted(Conversation.objects.values_list('last_seq', flat=True)),\n"
        "      Event.objects.filter(seq=2, payload__content='zz').count())\n"
    )
    proc = _django(code, DATABASE_URL=pg_database)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["[None, None, None]", "[2, 2, 2] 3"]


def _redis_layer():
    from agent.server.layers import RedisLayer

    return RedisLayer(hosts=[{"address": REDIS_URL, "socket_timeout": 30}])


async def _receive(layer, channel, timeout=3.0):
    return await asyncio.wait_for(layer.receive(channel), timeout)


async def _nothing_more(layer, channel) -> bool:
    # Not a receive with a timeout: cancelling a receive drops a pub/sub channel.
    await asyncio.sleep(0.3)
    return layer._get_layer().channels[channel].empty()


async def _two_members(layer, prefix: str) -> tuple[str, str, str]:
    """Two new channels of this process in a new group: (first, second, group)."""
    first, second = await layer.new_channel(), await layer.new_channel()
    group = f"{prefix}-{uuid.uuid4().hex[:8]}"
    await layer.group_add(group, first)
    await layer.group_add(group, second)
    return first, second, group


def _count_publishes(layer) -> list:
    shard = layer._get_layer()._shards[0]
    published, real = [], shard.publish

    async def publish(channel, message):
        published.append(channel)
        await real(channel, message)

    shard.publish = publish
    return published


async def test_redis_url_selects_the_redis_layer_and_delivers_messages():
    layer = _redis_layer()
    try:
        channel = await asyncio.wait_for(layer.new_channel(), 3)
        group = f"harness-test-{uuid.uuid4().hex[:8]}"
        await asyncio.wait_for(layer.group_add(group, channel), 3)
        await layer.group_send(group, {"type": "ping", "n": 1})
        message = await _receive(layer, channel)
    except (OSError, TimeoutError) as exc:
        require_service("Redis", f"{REDIS_URL}: {exc!r}")
    finally:
        await layer.flush()
    assert message == {"type": "ping", "n": 1}
    proc = _django(
        "from django.conf import settings; print(settings.CHANNEL_LAYERS['default']['BACKEND'])",
        REDIS_URL=REDIS_URL,
    )
    assert proc.stdout.strip() == "agent.server.layers.RedisLayer", proc.stderr


async def test_redis_layer_group_send_within_one_process_makes_no_redis_call():
    require_redis()
    layer = _redis_layer()
    try:
        a, b, group = await _two_members(layer, "local")
        published = _count_publishes(layer)
        for n in range(3):
            await layer.group_send(group, {"type": "frame", "n": n})
        assert [(await _receive(layer, a))["n"] for _ in range(3)] == [0, 1, 2]
        assert [(await _receive(layer, b))["n"] for _ in range(3)] == [0, 1, 2]
        assert published == []
    finally:
        await layer.flush()


async def test_redis_layer_reaches_members_in_other_processes_exactly_once():
    require_redis()
    here, there = _redis_layer(), _redis_layer()  # two processes' layers: own connections
    group = f"shared-{uuid.uuid4().hex[:8]}"
    try:
        mine, theirs = await here.new_channel(), await there.new_channel()
        await here.group_add(group, mine)
        await here.group_send(group, {"type": "frame", "n": 0})  # caches "nobody else"
        assert (await _receive(here, mine))["n"] == 0
        await there.group_add(group, theirs)  # announced: here forgets its cached count
        await asyncio.sleep(0.3)
        await here.group_send(group, {"type": "frame", "n": 1})
        await there.group_send(group, {"type": "frame", "n": 2})
        assert [(await _receive(here, mine))["n"] for _ in range(2)] == [1, 2]
        assert [(await _receive(there, theirs))["n"] for _ in range(2)] == [1, 2]
        assert await _nothing_more(here, mine) and await _nothing_more(there, theirs)
        # a direct send to another process's channel
        await here.send(theirs, {"type": "direct"})
        assert (await _receive(there, theirs))["type"] == "direct"
        # once the other process leaves, sends are local again
        await there.group_discard(group, theirs)
        await asyncio.sleep(0.3)
        published = _count_publishes(here)
        await here.group_send(group, {"type": "frame", "n": 3})
        assert (await _receive(here, mine))["n"] == 3
        assert published == []
    finally:
        await here.flush()
        await there.flush()


async def test_redis_layer_never_caches_a_count_read_while_a_process_joined():
    require_redis()
    layer, there = _redis_layer(), _redis_layer()
    try:
        inner = layer._get_layer()
        channel = await layer.new_channel()
        group = f"race-{uuid.uuid4().hex[:8]}"
        await layer.group_add(group, channel)
        shard = inner._shards[0]
        real = shard._redis.pubsub_numsub

        async def racing(*names):
            counts = await real(*names)
            # meanwhile: another process announces a join of another group, then of this one
            await there._get_layer().group_add(f"other-{group}", await there.new_channel())
            await there._get_layer().group_add(group, await there.new_channel())
            await asyncio.sleep(0.3)
            return counts

        shard._redis.pubsub_numsub = racing
        published = _count_publishes(layer)
        await layer.group_send(group, {"type": "frame"})
        group_channel = inner._get_group_channel_name(group)
        assert published == [group_channel]  # published, to whoever is there now
        assert group_channel not in inner._peers  # and the doubtful count not kept
        assert (await _receive(layer, channel))["type"] == "frame"  # back through Redis
        # a join of another group meanwhile leaves this group's count trusted
        quiet = f"quiet-{uuid.uuid4().hex[:8]}"
        await layer.group_add(quiet, channel)

        async def unrelated(*names):
            counts = await real(*names)
            await there._get_layer().group_add(f"more-{quiet}", await there.new_channel())
            await asyncio.sleep(0.3)
            return counts

        shard._redis.pubsub_numsub = unrelated
        published.clear()
        await layer.group_send(quiet, {"type": "local"})
        assert published == [] and inner._get_group_channel_name(quiet) in inner._peers
        assert (await _receive(layer, channel))["type"] == "local"
    finally:
        await layer.flush()
        await there.flush()


def test_redis_layer_from_settings_receives_after_a_quiet_spell():
    """A receive that waits longer than channels_redis's 5 s blocking pop still works (redis-
    py 8's default 5 s socket timeout used to break it)."""
    code = (
        "import asyncio, django; django.setup()\n"
        "from channels.layers import get_channel_layer\n"
        "async def main():\n"
        "    layer = get_channel_layer()\n"
        "    channel = await layer.new_channel()\n"
        "    async def later():\n"
        "        await asyncio.sleep(6.5)\n"
        "        await layer.send(channel, {'type': 'late'})\n"
        "    task = asyncio.create_task(later())\n"
        "    print((await layer.receive(channel))['type'])\n"
        "    await task\n"
        "asyncio.run(main())\n"
    )
    proc = _django(code, REDIS_URL=REDIS_URL)
    assert proc.returncode == 0 and proc.stdout.strip() == "late", proc.stderr[-2000:]


async def test_redis_layer_hands_a_local_frame_to_an_idle_sink_and_queues_behind_older_ones():
    require_redis()
    layer = _redis_layer()
    try:
        direct, queued, group = await _two_members(layer, "sink")
        taken, accept = [], [True]

        async def sink(message):
            if accept[0]:
                taken.append(message["n"])
            return accept[0]

        layer.attach(direct, sink)
        await layer.group_send(group, {"type": "frame", "n": 0})
        assert taken == [0]  # not serialised, not queued: taken in the sender's task
        assert await _nothing_more(layer, direct)
        accept[0] = False  # the socket is busy: queued
        await layer.group_send(group, {"type": "frame", "n": 1})
        accept[0] = True  # idle again, but frame 1 still waits in its queue: 2 queues behind
        await layer.group_send(group, {"type": "frame", "n": 2})
        assert taken == [0]
        assert [(await _receive(layer, direct))["n"] for _ in range(2)] == [1, 2]
        # the socket without a sink got all three through its queue
        assert [(await _receive(layer, queued))["n"] for _ in range(3)] == [0, 1, 2]
        layer.detach(direct)
        await layer.group_send(group, {"type": "frame", "n": 3})
        assert taken == [0] and (await _receive(layer, direct))["n"] == 3
    finally:
        await layer.flush()


async def test_redis_layer_queues_for_a_sink_that_fails_or_whose_receive_ended():
    require_redis()
    layer = _redis_layer()
    try:
        failing, gone, group = await _two_members(layer, "sink-end")
        calls = []

        async def broken(message):
            raise OSError("the socket is closing")

        async def sink(message):
            calls.append(message["n"])
            return True

        layer.attach(failing, broken)
        layer.attach(gone, sink)
        receiving = asyncio.ensure_future(layer.receive(gone))
        await asyncio.sleep(0.05)
        receiving.cancel()  # the socket's task ended without disconnect()
        await asyncio.sleep(0.05)
        await layer.group_send(group, {"type": "frame", "n": 0})
        assert calls == []  # nobody receives on that channel: not handed to its sink
        # the failing sink's frame is queued: the socket's own task meets it
        assert (await _receive(layer, failing))["n"] == 0
    finally:
        await layer.flush()
