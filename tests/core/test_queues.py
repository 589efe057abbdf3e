"""Steer and follow-up queues in the agent loop, through the real SDK
against the test model server. A gate tool holds a tool call running until the test has
queued what it wants: the queue is exercised at the exact point each rule speaks of."""

from __future__ import annotations

import asyncio
import json

import pytest

from agent.core.loop import STEERED, NotRunning, QueueFull
from agent.core.tools import build_tools
from agent.core.tools.base import ToolResult, object_schema
from testkit.model_server import HttpError, text_reply, tool_reply
from tests.conftest import types
from tests.history_check import assert_valid_history


class GateTool:
    """A tool that runs until the test opens its gate."""

    name = "gate"
    description = "Waits."
    input_schema = object_schema(required=())

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.calls = 0

    async def execute(self, params):
        self.calls += 1
        self.started.set()
        await self.release.wait()
        return ToolResult(json.dumps({"content": "gate opened"}))


@pytest.fixture
def gate():
    return GateTool()


@pytest.fixture
def harness(make_harness, workspace, gate):
    (workspace.root / "notes.txt").write_text("some notes")
    return make_harness(tools=[gate, *build_tools(workspace, "off")])


def finals(events):
    return [e for e in events if e.type == "status" and e.state in ("idle", "error")]


def users(events):
    return [(e.content, e.mode) for e in events if e.type == "user"]


async def while_gate_runs(loop, gate, content="go", *, then):
    """Start a prompt, call ``then()`` once the gate tool runs, open the gate, finish."""
    task = asyncio.create_task(loop.prompt(content))
    await asyncio.wait_for(gate.started.wait(), 10)
    result = then()
    gate.release.set()
    return result, await asyncio.wait_for(task, 20)


async def test_follow_ups_are_delivered_in_order_when_the_agent_would_stop(
    harness, gate, model_server
):
    loop, events = harness
    model_server.enqueue(
        tool_reply(("gate", {})), text_reply("first done"),
        text_reply("second done"), text_reply("third done"),
    )  # fmt: skip
    ids, result = await while_gate_runs(
        loop,
        gate,
        then=lambda: [
            loop.queue("and the second?", "follow_up"),
            loop.queue("and a third", "follow_up"),
        ],
    )
    assert result.state == "idle"
    assert users(events) == [("go", None), ("and the second?", "follow_up"),
                             ("and a third", "follow_up")]  # fmt: skip
    queued = [e for e in events if e.type == "queued"]
    assert [(e.id, e.mode) for e in queued] == [(ids[0], "follow_up"), (ids[1], "follow_up")]
    # One run: exactly one final status, at the very end; each follow-up after an answer.
    assert finals(events) == [events[-1]] and events[-1].state == "idle"
    kinds = types(events)
    assert kinds.index("user", 1) > kinds.index("text")
    texts = [e.content for e in events if e.type == "text"]
    assert texts == ["first done", "second done", "third done"]
    # The model saw each follow-up as a user message, the answers before it kept.
    last = model_server.bodies[-1]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user",
                                         "assistant", "user"]  # fmt: skip
    assert last[-1]["content"] == [{"type": "text", "text": "and a third"}]
    assert len(model_server.requests) == 4
    assert_valid_history(loop.messages)


async def test_steer_during_a_tool_skips_the_turns_other_calls_and_goes_on(
    harness, gate, model_server, workspace
):
    loop, events = harness
    model_server.enqueue(
        tool_reply(("gate", {}), ("write", {"path": "x.txt", "content": "no"}),
                   ("read", {"path": "notes.txt"})),
        text_reply("Steered, reading notes instead."),
    )  # fmt: skip
    _, result = await while_gate_runs(
        loop, gate, then=lambda: loop.queue("stop, read notes", "steer")
    )
    assert result.state == "idle"
    results = [e for e in events if e.type == "tool_result"]
    assert [r.isError for r in results] == [False, True, True]
    assert all(json.loads(r.result) == {"error": STEERED} for r in results[1:])
    assert not (workspace.root / "x.txt").exists()  # not executed
    assert users(events) == [("go", None), ("stop, read notes", "steer")]
    steer_at = [e.type for e in events].index("user", 1)
    assert all(events.index(r) < steer_at for r in results)
    assert finals(events) == [events[-1]] and events[-1].state == "idle"
    # One user message: every tool result, then the steering text.
    sent = model_server.bodies[1]["messages"][-1]
    assert sent["role"] == "user"
    assert [b["type"] for b in sent["content"]] == ["tool_result"] * 3 + ["text"]
    assert sent["content"][-1]["text"] == "stop, read notes"
    assert [b["is_error"] for b in sent["content"][:3]] == [False, True, True]
    assert_valid_history(loop.messages)


async def test_steer_while_text_streams_is_delivered_at_the_end_of_that_turn(
    make_harness, model_server
):
    steer = {}

    def on_event(event):
        events.append(event)
        if event.type == "text_delta" and not steer:
            steer["id"] = loop.queue("shorter please", "steer")

    events: list = []
    loop, _ = make_harness(tools=[], events=None)
    loop.on_event(on_event)
    model_server.enqueue(text_reply("a long answer " * 20, delay=0.005), text_reply("Short."))
    assert (await loop.prompt("explain")).state == "idle"
    kinds = types(events)
    assert kinds == ["user", "status", "queued", "text", "usage", "user", "status", "text",
                     "usage", "status"]  # fmt: skip
    assert users(events)[-1] == ("shorter please", "steer")
    # The first answer completed whole before the steer went in.
    assert [e.content for e in events if e.type == "text"][1] == "Short."
    assert model_server.bodies[1]["messages"][-1] == {
        "role": "user",
        "content": [{"type": "text", "text": "shorter please"}],
    }
    assert finals(events) == [events[-1]]


async def test_steer_while_a_turn_with_tool_calls_streams_runs_none_of_them(
    make_harness, workspace, model_server
):
    events: list = []

    def on_event(event):
        events.append(event)
        if event.type == "text_delta" and not loop.queued and "steered" not in seen:
            seen.add("steered")
            loop.queue("never mind", "steer")

    seen: set = set()
    loop, _ = make_harness(tools=build_tools(workspace, "off"))
    loop.on_event(on_event)
    model_server.enqueue(
        tool_reply(("write", {"path": "a.txt", "content": "a"}), text="Writing now", delay=0.005),
        text_reply("OK, stopped."),
    )  # fmt: skip
    assert (await loop.prompt("write a")).state == "idle"
    assert not (workspace.root / "a.txt").exists()
    result = next(e for e in events if e.type == "tool_result")
    assert result.isError and json.loads(result.result) == {"error": STEERED}
    assert [e.state for e in events if e.type == "status"].count("running_tool") == 0
    assert users(events)[-1] == ("never mind", "steer")
    assert_valid_history(loop.messages)


async def test_unqueue_removes_a_waiting_prompt_and_not_twice(harness, gate, model_server):
    loop, events = harness
    model_server.enqueue(tool_reply(("gate", {})), text_reply("done"), text_reply("kept"))

    def queue_and_remove():
        drop = loop.queue("drop me", "follow_up")
        keep = loop.queue("keep me", "follow_up")
        assert loop.unqueue(drop) is True
        assert loop.unqueue(drop) is False
        assert loop.unqueue("no-such-id") is False
        return drop, keep

    (drop, keep), result = await while_gate_runs(loop, gate, then=queue_and_remove)
    assert result.state == "idle"
    unqueued = [e for e in events if e.type == "unqueued"]
    assert [(e.id, e.reason) for e in unqueued] == [(drop, "removed")]
    assert users(events) == [("go", None), ("keep me", "follow_up")]
    assert len(model_server.requests) == 3
    assert loop.unqueue(keep) is False  # delivered: no longer in the queue


async def test_cancel_drops_the_queue_with_an_unqueued_each(harness, gate, model_server):
    loop, events = harness
    model_server.enqueue(tool_reply(("gate", {})))
    task = asyncio.create_task(loop.prompt("go"))
    await asyncio.wait_for(gate.started.wait(), 10)
    ids = [loop.queue("one", "follow_up"), loop.queue("two", "steer")]
    assert loop.cancel()
    result = await asyncio.wait_for(task, 10)
    assert result.code == "cancelled"
    unqueued = [e for e in events if e.type == "unqueued"]
    assert [(e.id, e.reason) for e in unqueued] == [(ids[0], "cancelled"), (ids[1], "cancelled")]
    kinds = types(events)
    assert kinds[-2:] == ["error", "status"] and kinds.index("unqueued") < kinds.index("error")
    assert finals(events) == [events[-1]] and events[-1].state == "error"
    assert users(events) == [("go", None)] and len(model_server.requests) == 1
    assert loop.queued == []


async def test_a_run_that_fails_drops_its_queue_as_not_sent(harness, gate, model_server):
    loop, events = harness
    model_server.enqueue(tool_reply(("gate", {})), HttpError(400, "invalid_request_error", "bad"))
    queued, result = await while_gate_runs(
        loop, gate, then=lambda: loop.queue("later", "follow_up")
    )
    assert result.state == "error"
    assert [(e.id, e.reason) for e in events if e.type == "unqueued"] == [(queued, "not_sent")]
    assert finals(events) == [events[-1]]


async def test_queueing_needs_a_running_prompt_a_known_mode_and_room(harness, gate, model_server):
    loop, events = harness
    with pytest.raises(NotRunning):
        loop.queue("hello", "follow_up")
    model_server.enqueue(tool_reply(("gate", {})), text_reply("done"))
    model_server.fallback = lambda body: text_reply("more")

    def fill():
        with pytest.raises(ValueError):
            loop.queue("x", "later")
        for n in range(20):
            loop.queue(f"q{n}", "follow_up")
        with pytest.raises(QueueFull):
            loop.queue("one too many", "follow_up")
        for item in loop.queued[1:]:
            loop.unqueue(item.id)

    await while_gate_runs(loop, gate, then=fill)
    assert [e.type for e in events].count("queued") == 20
    assert users(events)[-1] == ("q0", "follow_up")


def test_queue_events_round_trip_through_their_json():
    from agent.core.events import QueuedEvent, UnqueuedEvent, UserEvent, from_dict

    for event in (
        QueuedEvent(seq=3, id="abc", content="hi", mode="steer"),
        UnqueuedEvent(seq=4, id="abc", reason="removed"),
        UserEvent(seq=5, content="hi", mode="follow_up"),
        UserEvent(seq=6, content="plain"),
    ):
        assert from_dict(event.to_dict()) == event
    assert "mode" not in UserEvent(content="plain").to_dict()
    assert UnqueuedEvent(id="x").to_dict().keys() == {"type", "seq", "timestamp", "id"}
    assert QueuedEvent(id="q", content="c", mode="follow_up").to_dict()["mode"] == "follow_up"


async def test_each_prompt_and_queued_prompt_carries_its_author_and_the_model_sees_text_only(
    harness, gate, model_server
):
    """On a shared conversation, who sent a prompt is on its events, never in the history."""
    loop, events = harness
    model_server.enqueue(tool_reply(("gate", {})), text_reply("done"), text_reply("again"))
    task = asyncio.create_task(loop.prompt("from olga", "olga"))
    await asyncio.wait_for(gate.started.wait(), 10)
    loop.queue("from cole", "follow_up", author="cole")
    gate.release.set()
    await asyncio.wait_for(task, 20)
    sent = [(e.content, e.author) for e in events if e.type == "user"]
    assert sent == [("from olga", "olga"), ("from cole", "cole")]
    queued = next(e for e in events if e.type == "queued")
    assert queued.author == "cole" and queued.to_dict()["author"] == "cole"
    assert [e.to_dict()["author"] for e in events if e.type == "user"] == ["olga", "cole"]
    last = model_server.bodies[-1]["messages"]
    assert last[-1]["content"] == [{"type": "text", "text": "from cole"}]
    await loop.prompt("unshared")
    assert "author" not in [e for e in events if e.type == "user"][-1].to_dict()
