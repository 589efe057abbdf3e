"""Two Daphne processes behind one database (PostgreSQL) and one channel layer (Redis):
every conversation is shared, cancel crosses processes, a killed process's run is
recovered by the other."""

from __future__ import annotations

import time

import pytest

from testkit.api_client import Api, read_until
from testkit.model_server import ModelServer, echo_fallback, text_reply
from tests.services import two_servers

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def model():
    server = ModelServer().start()
    server.fallback = echo_fallback
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def unread_replies_forgotten(model):
    """A test that failed leaves its scripted reply unread: the next one must not get it."""
    model.reset()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, model):
    with two_servers(tmp_path_factory.mktemp("cluster"), model.url, "olga") as (a, b):
        token = a.manage("create_api_token", "olga").strip()
        yield a, b, Api(a.url, token), Api(b.url, token)


def events_of(items):
    return [item[2] for item in items if item[0] == "event"]


def is_final(item) -> bool:
    return (
        item[0] == "event" and item[2]["type"] == "status" and item[2]["state"] in ("idle", "error")
    )


def test_healthz_checks_postgres_and_redis_on_both_processes(cluster):
    import json
    import urllib.request

    for server in cluster[:2]:
        with urllib.request.urlopen(f"{server.url}/healthz") as response:
            body = json.loads(response.read())
        checks = {k: v for k, v in body.items()
                  if k not in ("version", "uptime_seconds", "cli_agents")}  # fmt: skip
        assert checks == {
            "status": "ok",
            "database": "ok",
            "channel_layer": "ok",
            "state_dir": "ok",  # PostgreSQL's disk is its server's: no database_disk
            "workspaces_disk": "ok",
            "sandbox": "off (HARNESS_BASH=off)",  # two_servers turns bash off
        }


def test_a_stream_on_one_process_sees_a_run_started_on_the_other(cluster, model):
    _, _, on_a, on_b = cluster
    conversation = on_a.call("POST", "/api/conversations", {})[1]["id"]
    _, stream = on_a.events(conversation)
    model.enqueue(text_reply("served by B, seen on A", delay=0.005))
    assert on_b.call("POST", f"/api/conversations/{conversation}/prompt",
                     {"content": "hello"})[0] == 202  # fmt: skip
    events = events_of(read_until(stream, is_final))
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert next(e for e in events if e["type"] == "text")["content"] == "served by B, seen on A"
    assert events[-1]["state"] == "idle"


def test_cancel_through_one_process_stops_a_run_on_the_other(cluster, model):
    _, _, on_a, on_b = cluster
    conversation = on_a.call("POST", "/api/conversations", {})[1]["id"]
    _, stream = on_a.events(conversation)
    model.enqueue(text_reply("long " * 2000, delay=0.01))
    assert on_b.call("POST", f"/api/conversations/{conversation}/prompt",
                     {"content": "run on B"})[0] == 202  # fmt: skip
    read_until(stream, lambda item: item[0] == "event" and item[2]["type"] == "text_delta")
    started = time.monotonic()
    assert on_a.call("POST", f"/api/conversations/{conversation}/cancel") == (
        200, {"cancelled": True})  # fmt: skip
    events = events_of(read_until(stream, is_final))
    assert time.monotonic() - started < 10  # (the whole answer streams for 12 s)
    assert [e["code"] for e in events if e["type"] == "error"] == ["cancelled"]
    partial = [e for e in events if e["type"] == "text"]
    assert partial and partial[0]["content"].startswith("long long")
    assert len(partial[0]["content"]) < len("long " * 2000)  # stopped, not finished


def test_a_killed_processs_run_is_recovered_by_the_other(cluster, model):
    a, b, on_a, on_b = cluster
    conversation = on_a.call("POST", "/api/conversations", {})[1]["id"]
    _, stream = on_a.events(conversation)
    model.enqueue(text_reply("doomed " * 2000, delay=0.01))
    assert on_b.call("POST", f"/api/conversations/{conversation}/prompt",
                     {"content": "run on B"})[0] == 202  # fmt: skip
    read_until(stream, lambda item: item[0] == "event" and item[2]["type"] == "text_delta")
    streaming_since = time.monotonic()  # partial text is stored once a second: wait past it
    read_until(stream, lambda item: time.monotonic() - streaming_since > 1.5)
    b.kill()  # SIGKILL: its lease stops being renewed
    try:
        events = events_of(read_until(stream, is_final, timeout=20))
        assert [e["code"] for e in events if e["type"] == "error"] == ["interrupted"]
        text = [e for e in events if e["type"] == "text"]
        assert text and text[-1]["content"].startswith("doomed doomed")
        model.enqueue(text_reply("A carries on"))
        assert on_a.call("POST", f"/api/conversations/{conversation}/prompt",
                         {"content": "still there?"})[0] == 202  # fmt: skip
        events = events_of(read_until(stream, is_final))
        assert next(e for e in events if e["type"] == "text")["content"] == "A carries on"
        sent = model.bodies[-1]["messages"]
        assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    finally:
        b.start()


def _ends_within(stream, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    # heartbeats every second keep this turning: it stops at the stream's end or the deadline
    return all(time.monotonic() <= deadline for _ in stream)


def test_deactivating_a_user_from_a_third_process_ends_their_streams_on_both(cluster):
    """The revocation goes from a management process through Redis to both servers (the
    streams' own re-checks would not notice: their user object is the one they started
    with)."""
    a, _, on_a, on_b = cluster
    conversation = on_a.call("POST", "/api/conversations", {})[1]["id"]
    streams = [api.events(conversation)[1] for api in (on_a, on_b)]
    set_active = "from agent.models import User; u = User.objects.get(username='olga'); " \
                 "u.is_active = {}; u.save()"  # fmt: skip
    a.manage("shell", "-c", set_active.format(False))
    try:
        assert [_ends_within(stream, 10) for stream in streams] == [True, True]
    finally:
        a.manage("shell", "-c", set_active.format(True))


def test_queue_and_unqueue_through_one_process_on_a_run_on_the_other(cluster, model):
    """Interfaces §8 across processes: the request goes through Redis to the process that
    runs the prompt, which answers on the requester's channel."""
    _, _, on_a, on_b = cluster
    conversation = on_a.call("POST", "/api/conversations", {})[1]["id"]
    _, stream = on_a.events(conversation)
    model.enqueue(text_reply("long " * 300, delay=0.01), text_reply("follow-up answered"))
    assert on_a.call("POST", f"/api/conversations/{conversation}/prompt",
                     {"content": "run on A"})[0] == 202  # fmt: skip
    seen = read_until(stream, lambda item: item[0] == "event" and item[2]["type"] == "text_delta")
    base = f"/api/conversations/{conversation}"
    answers = [on_b.call("POST", f"{base}/prompt", {"content": text, "mode": "follow_up"})
               for text in ("removed on B", "kept from B")]  # fmt: skip
    assert [status for status, _ in answers] == [202, 202]
    removed, kept = (payload["queued"] for _, payload in answers)
    assert on_b.call("DELETE", f"{base}/queue/{removed}") == (204, "")
    assert on_b.call("DELETE", f"{base}/queue/{removed}")[0] == 404
    events = events_of(seen + read_until(stream, is_final))
    assert [(e["id"], e["reason"]) for e in events if e["type"] == "unqueued"] == [
        (removed, "removed")]  # fmt: skip
    users = [(e["content"], e.get("mode")) for e in events if e["type"] == "user"]
    assert users == [("run on A", None), ("kept from B", "follow_up")]
    assert events[-1]["state"] == "idle"
    assert [e for e in events if e["type"] == "status" and e["state"] == "idle"] == [events[-1]]
