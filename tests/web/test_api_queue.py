"""Steering a running agent over the HTTP + SSE API (docs/API.md), against a live Daphne
server, the real SDK and the test model server. A bash call that waits for a file in the
workspace holds a tool running until the test has queued what it wants, then the test
creates the file: no sleeps decide anything."""

from __future__ import annotations

import json
import uuid

import pytest

from agent.core.loop import STEERED
from testkit.api_client import Api, read_until
from testkit.live import LiveServer
from testkit.model_server import text_reply, tool_reply

GATE = "while [ ! -e {name} ]; do sleep 0.02; done; echo opened"


@pytest.fixture(scope="module")
def live(tmp_path_factory, model):
    server = LiveServer(tmp_path_factory.mktemp("queue-api"), ANTHROPIC_API_KEY="test-key",
                        ANTHROPIC_BASE_URL=model.url, HARNESS_BASH="unsafe",
                        HARNESS_SSE_HEARTBEAT="1", HARNESS_RUNS_PER_MINUTE="100",
                        HARNESS_CONCURRENT_RUNS="5", HARNESS_MAX_PROMPT_CHARS="500",
                        HARNESS_RUN_LEASE="3")  # fmt: skip
    server.start()
    server.create_users("quinn", "rob")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def quinn(live):
    return Api(live.url, live.manage("create_api_token", "quinn").strip())


@pytest.fixture(scope="module")
def rob(live):
    return Api(live.url, live.manage("create_api_token", "rob").strip())


@pytest.fixture(scope="module")
def workspace(live):
    code = "from agent.models import User; print(User.objects.get(username='quinn').id)"
    user_id = live.manage("shell", "-c", code).strip().splitlines()[-1]
    return live.root / "workspaces" / user_id


class Gate:
    """A bash command that runs until ``open()``."""

    def __init__(self, workspace):
        self.name = f"gate-{uuid.uuid4().hex[:8]}"
        self.workspace = workspace
        self.call = ("bash", {"command": GATE.format(name=self.name)})

    def open(self):
        (self.workspace / self.name).write_text("")


def new_conversation(api: Api) -> str:
    status, payload = api.call("POST", "/api/conversations", {})
    assert status == 201, payload
    return payload["id"]


def prompt(api, conversation, content, mode=None):
    body = {"content": content} if mode is None else {"content": content, "mode": mode}
    return api.call("POST", f"/api/conversations/{conversation}/prompt", body)


def is_event(kind, **fields):
    def match(item):
        return (
            item[0] == "event"
            and item[2]["type"] == kind
            and all(item[2].get(k) == v for k, v in fields.items())
        )

    return match


def is_final(item) -> bool:
    return is_event("status", state="idle")(item) or is_event("status", state="error")(item)


def events_of(items):
    return [item[2] for item in items if item[0] == "event"]


def finals(events):
    return [e for e in events if e["type"] == "status" and e["state"] in ("idle", "error")]


def start_with_gate(api, conversation, gate, *after, text="go"):
    """Open the stream, start a prompt whose first tool is the gate; return the stream and
    what it read up to the gate running."""
    _, stream = api.events(conversation)
    assert prompt(api, conversation, text) == (202, {"accepted": True})
    seen = read_until(stream, is_event("status", state="running_tool", message="bash"))
    return stream, seen


def test_a_mode_on_an_idle_conversation_runs_the_prompt_at_once(quinn, fresh):
    conversation = new_conversation(quinn)
    _, stream = quinn.events(conversation)
    fresh.enqueue(text_reply("right away"))
    assert prompt(quinn, conversation, "now", "steer") == (202, {"accepted": True})
    events = events_of(read_until(stream, is_final))
    user = next(e for e in events if e["type"] == "user")
    assert user["content"] == "now" and "mode" not in user
    assert not [e for e in events if e["type"] == "queued"]


def test_follow_ups_run_in_order_in_the_same_run_with_one_final_status(quinn, fresh, workspace):
    conversation = new_conversation(quinn)
    gate = Gate(workspace)
    fresh.enqueue(tool_reply(gate.call), text_reply("first done"), text_reply("second done"),
                  text_reply("third done"))  # fmt: skip
    stream, seen = start_with_gate(quinn, conversation, gate)
    # running, no mode: refused as before
    status, payload = prompt(quinn, conversation, "plain")
    assert status == 409 and payload["error"] == "prompt_running"
    answers = [prompt(quinn, conversation, text, "follow_up") for text in ("second", "third")]
    assert [status for status, _ in answers] == [202, 202]
    ids = [payload["queued"] for _, payload in answers]
    assert all(payload["accepted"] is True for _, payload in answers) and len(set(ids)) == 2
    gate.open()
    events = events_of(seen + read_until(stream, is_final))
    assert [(e["id"], e["content"], e["mode"]) for e in events if e["type"] == "queued"] == [
        (ids[0], "second", "follow_up"), (ids[1], "third", "follow_up")]  # fmt: skip
    users = [(e["content"], e.get("mode")) for e in events if e["type"] == "user"]
    assert users == [("go", None), ("second", "follow_up"), ("third", "follow_up")]
    texts = [e["content"] for e in events if e["type"] == "text"]
    assert texts == ["first done", "second done", "third done"]
    assert finals(events) == [events[-1]] and events[-1]["state"] == "idle"
    # The stored log says the same (the replay), the conversation is idle again.
    _, replay = quinn.events(conversation)
    stored = events_of(read_until(replay, is_final))
    assert [e for e in stored if e["type"] == "user"] == [e for e in events if e["type"] == "user"]
    listed = quinn.call("GET", "/api/conversations")[1]["conversations"]
    assert next(c for c in listed if c["id"] == conversation)["state"] == "idle"


def test_steer_during_a_tool_skips_the_other_calls_and_the_run_goes_on(quinn, fresh, workspace):
    conversation = new_conversation(quinn)
    gate = Gate(workspace)
    fresh.enqueue(
        tool_reply(gate.call, ("write", {"path": "skipped.txt", "content": "x"})),
        text_reply("Understood, changing course."),
    )  # fmt: skip
    stream, seen = start_with_gate(quinn, conversation, gate)
    status, payload = prompt(quinn, conversation, "use the other file", "steer")
    assert status == 202 and payload["accepted"] is True
    gate.open()
    events = events_of(seen + read_until(stream, is_final))
    results = [e for e in events if e["type"] == "tool_result"]
    assert [r["isError"] for r in results] == [False, True], [r["result"] for r in results]
    assert json.loads(results[1]["result"]) == {"error": STEERED}
    assert not (workspace / "skipped.txt").exists()
    kinds = [e["type"] for e in events if e["type"] != "text_delta"]
    steer_at = next(i for i, e in enumerate(events) if e["type"] == "user" and e.get("mode"))
    assert (
        events[steer_at]["mode"] == "steer" and events[steer_at]["content"] == "use the other file"
    )
    assert all(events.index(r) < steer_at for r in results)
    assert kinds[-3:] == ["text", "usage", "status"] and finals(events) == [events[-1]]
    sent = fresh.bodies[-1]["messages"][-1]["content"]
    assert [b["type"] for b in sent] == ["tool_result", "tool_result", "text"]


def test_steer_while_text_streams_is_delivered_at_the_end_of_the_turn(quinn, fresh):
    conversation = new_conversation(quinn)
    fresh.enqueue(text_reply("a long answer " * 80, delay=0.02), text_reply("Shorter then."))
    _, stream = quinn.events(conversation)
    assert prompt(quinn, conversation, "explain")[0] == 202
    seen = read_until(stream, is_event("text_delta"))
    status, payload = prompt(quinn, conversation, "shorter", "steer")
    assert status == 202 and payload["queued"]
    events = [e for e in events_of(seen + read_until(stream, is_final))
              if e["type"] != "text_delta"]  # fmt: skip
    kinds = [e["type"] for e in events]
    first_text, steer = kinds.index("text"), kinds.index("user", 1)
    assert first_text < steer and events[first_text]["content"] == "a long answer " * 80
    assert events[steer]["mode"] == "steer"
    assert [e["content"] for e in events if e["type"] == "text"][-1] == "Shorter then."
    assert finals(events) == [events[-1]]


def test_unqueue_is_204_then_404_and_the_prompt_is_never_sent(quinn, fresh, workspace):
    conversation = new_conversation(quinn)
    gate = Gate(workspace)
    fresh.enqueue(tool_reply(gate.call), text_reply("done"))
    stream, seen = start_with_gate(quinn, conversation, gate)
    queued = prompt(quinn, conversation, "forget this", "follow_up")[1]["queued"]
    base = f"/api/conversations/{conversation}/queue"
    assert quinn.call("DELETE", f"{base}/{queued}") == (204, "")
    status, payload = quinn.call("DELETE", f"{base}/{queued}")
    assert status == 404 and payload["error"] == "not_found"
    for unknown in (uuid.uuid4().hex, "not-an-id", "x" * 300):
        assert quinn.call("DELETE", f"{base}/{unknown}")[0] == 404
    gate.open()
    events = events_of(seen + read_until(stream, is_final))
    assert [(e["id"], e.get("reason")) for e in events if e["type"] == "unqueued"] == [
        (queued, "removed")]  # fmt: skip
    assert [e["content"] for e in events if e["type"] == "user"] == ["go"]
    assert len(fresh.requests) == 2  # nothing more was asked of the model


def test_a_delivered_prompt_cannot_be_unqueued(quinn, fresh, workspace):
    conversation = new_conversation(quinn)
    gate = Gate(workspace)
    fresh.enqueue(tool_reply(gate.call), text_reply("done"), text_reply("after"))
    stream, _ = start_with_gate(quinn, conversation, gate)
    queued = prompt(quinn, conversation, "then this", "follow_up")[1]["queued"]
    gate.open()
    read_until(stream, is_final)
    status, _ = quinn.call("DELETE", f"/api/conversations/{conversation}/queue/{queued}")
    assert status == 404


def test_cancel_drops_the_queue_with_an_unqueued_each(quinn, fresh, workspace):
    conversation = new_conversation(quinn)
    gate = Gate(workspace)
    fresh.enqueue(tool_reply(gate.call))
    stream, seen = start_with_gate(quinn, conversation, gate)
    ids = [prompt(quinn, conversation, text, mode)[1]["queued"]
           for text, mode in (("one", "follow_up"), ("two", "steer"))]  # fmt: skip
    assert quinn.call("POST", f"/api/conversations/{conversation}/cancel") == (
        200, {"cancelled": True})  # fmt: skip
    events = events_of(seen + read_until(stream, is_final))
    gate.open()
    dropped = [(e["id"], e["reason"]) for e in events if e["type"] == "unqueued"]
    assert dropped == [(ids[0], "cancelled"), (ids[1], "cancelled")]
    assert [e["code"] for e in events if e["type"] == "error"] == ["cancelled"]
    assert finals(events) == [events[-1]] and events[-1]["state"] == "error"
    assert [e["content"] for e in events if e["type"] == "user"] == ["go"]


def test_bad_queue_requests_change_nothing(quinn, rob, fresh, workspace):
    conversation = new_conversation(quinn)
    gate = Gate(workspace)
    fresh.enqueue(tool_reply(gate.call), text_reply("done"))
    stream, seen = start_with_gate(quinn, conversation, gate)
    for body in ({"content": "x", "mode": "later"}, {"content": "x", "mode": 3},
                 {"content": "", "mode": "steer"}, {"mode": "steer"}):  # fmt: skip
        status, payload = quinn.call("POST", f"/api/conversations/{conversation}/prompt", body)
        assert status == 400 and payload["error"] == "bad_request", body
    status, payload = prompt(quinn, conversation, "y" * 501, "follow_up")
    assert status == 400 and payload["error"] == "prompt_too_large"
    # Another user's conversation: not found, for queueing and removing alike.
    status, payload = prompt(rob, conversation, "mine now", "follow_up")
    assert status == 404 and payload["error"] == "not_found"
    queued = prompt(quinn, conversation, "kept", "follow_up")[1]["queued"]
    assert rob.call("DELETE", f"/api/conversations/{conversation}/queue/{queued}")[0] == 404
    gate.open()
    events = events_of(seen + read_until(stream, is_final))
    assert [e["content"] for e in events if e["type"] == "queued"] == ["kept"]
    assert [e["content"] for e in events if e["type"] == "user"] == ["go", "kept"]


def test_a_server_killed_mid_run_shows_the_queued_prompts_as_not_sent(
    quinn, fresh, workspace, live
):
    """Last in this module: it restarts the server."""
    conversation = new_conversation(quinn)
    gate = Gate(workspace)
    fresh.enqueue(tool_reply(gate.call))
    stream, _ = start_with_gate(quinn, conversation, gate)
    queued = prompt(quinn, conversation, "do not lose me", "follow_up")[1]["queued"]
    read_until(stream, is_event("queued"))  # stored before it is sent
    live.kill()  # SIGKILL: the run's lease is no longer renewed
    gate.open()
    live.start()
    # Any process's reaper (this one's starts with the stream) marks it interrupted.
    _, replay = quinn.events(conversation)
    events = events_of(read_until(replay, is_final, timeout=30))
    assert [e["code"] for e in events if e["type"] == "error"] == ["interrupted"]
    assert [(e["id"], e["content"]) for e in events if e["type"] == "queued"] == [
        (queued, "do not lose me")]  # fmt: skip
    assert [(e["id"], e["reason"]) for e in events if e["type"] == "unqueued"] == [
        (queued, "not_sent")]  # fmt: skip
    assert [e["content"] for e in events if e["type"] == "user"] == ["go"]
    # Idle again: the next prompt runs (its text, kept, can be sent again).
    fresh.enqueue(text_reply("back"))
    assert prompt(quinn, conversation, "do not lose me", "follow_up") == (202, {"accepted": True})
