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
    from channels_redis.pubsub import RedisPubSubChannelLayer

    return RedisPubSubChannelLayer(hosts=[{"address": REDIS_URL, "socket_timeout": 30}])


async def _receive(layer, channel, timeout=3.0):
    return await asyncio.wait_for(layer.receive(channel), timeout)


async def _next_is(layer, channel, sender, marker: str) -> bool:
    """Whether nothing more waits on the channel: a marker sent now is the next message.
    (Not a receive with a timeout: cancelling a receive drops a pub/sub channel.)"""
    await asyncio.sleep(0.3)
    await sender.send(channel, {"type": marker})
    return (await _receive(layer, channel))["type"] == marker


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
    assert proc.stdout.strip() == "channels_redis.pubsub.RedisPubSubChannelLayer", proc.stderr


async def test_redis_layer_reaches_members_in_other_processes_exactly_once():
    require_redis()
    here, there = _redis_layer(), _redis_layer()  # two processes' layers: own connections
    group = f"shared-{uuid.uuid4().hex[:8]}"
    try:
        mine, theirs = await here.new_channel(), await there.new_channel()
        await here.group_add(group, mine)
        await here.group_send(group, {"type": "frame", "n": 0})
        assert (await _receive(here, mine))["n"] == 0
        await there.group_add(group, theirs)
        await here.group_send(group, {"type": "frame", "n": 1})
        await there.group_send(group, {"type": "frame", "n": 2})
        assert [(await _receive(here, mine))["n"] for _ in range(2)] == [1, 2]
        assert [(await _receive(there, theirs))["n"] for _ in range(2)] == [1, 2]
        assert await _next_is(here, mine, here, "m1")
        assert await _next_is(there, theirs, here, "m2")
        # a direct send to another process's channel
        await here.send(theirs, {"type": "direct"})
        assert (await _receive(there, theirs))["type"] == "direct"
        # once the other process leaves, it gets no more of the group's messages
        await there.group_discard(group, theirs)
        await here.group_send(group, {"type": "frame", "n": 3})
        assert (await _receive(here, mine))["n"] == 3
        assert await _next_is(there, theirs, here, "m3")
    finally:
        await here.flush()
        await there.flush()


async def test_deployments_on_two_databases_of_one_redis_hear_nothing_of_each_other():
    """Redis delivers a PUBLISH to every subscriber of the server, whatever database each
    selected: the layer's names carry REDIS_URL's database number (harness_site/settings.py),
    or a sign-out of user 1 in one deployment (or test worker) ends user 1's streams in
    the other."""
    from channels_redis.pubsub import RedisPubSubChannelLayer

    from harness_site.settings import redis_channel_prefix

    require_redis()
    base = REDIS_URL.rsplit("/", 1)[0]

    def layer(database: int):
        url = f"{base}/{database}"
        return RedisPubSubChannelLayer(hosts=[{"address": url, "socket_timeout": 30}],
                                       prefix=redis_channel_prefix(url))  # fmt: skip

    here, here_too, other = layer(13), layer(13), layer(14)  # three processes
    group = f"user.{uuid.uuid4().hex[:8]}"
    try:
        mine, theirs = await here_too.new_channel(), await other.new_channel()
        await here_too.group_add(group, mine)
        await other.group_add(group, theirs)
        await here.group_send(group, {"type": "user.revoked"})
        assert (await _receive(here_too, mine))["type"] == "user.revoked"
        assert await _next_is(other, theirs, other, "marker")  # it never came
    finally:
        for each in (here, here_too, other):
            await each.flush()
    assert redis_channel_prefix("redis://h:6379/3") == "harness.db3"
    assert redis_channel_prefix("redis://:pw@h:6379?db=5") == "harness.db5"
    assert redis_channel_prefix("rediss://h") == "harness.db0"
    assert redis_channel_prefix("unix:///run/redis.sock?db=2") == "harness.db2"
    assert redis_channel_prefix("unix:///run/redis.sock") == "harness.db0"
    proc = _django("from django.conf import settings; "
                   "print(settings.CHANNEL_LAYERS['default']['CONFIG']['prefix'])",
                   REDIS_URL="redis://127.0.0.1:6379/7")  # fmt: skip
    assert proc.stdout.strip() == "harness.db7", proc.stderr


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
