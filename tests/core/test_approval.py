"""Tool approval in the agent loop, through the real SDK against the test
model server: ``ask`` waits on the user's decision for write/edit/bash only, ``read_only``
does not offer them, ``auto`` runs them at once."""

from __future__ import annotations

import asyncio
import json

import pytest

from agent.core.loop import Decision
from agent.core.tools import build_tools
from testkit.model_server import text_reply, tool_reply
from tests.history_check import assert_valid_history


@pytest.fixture
def tools(workspace):
    (workspace.root / "notes.txt").write_text("some notes")
    return build_tools(workspace, "unsafe")


async def waiting(loop, call_id=None):
    """Until a call waits for a decision (its id)."""
    for _ in range(1000):
        if loop.pending_approvals:
            assert call_id is None or loop.pending_approvals == [call_id]
            return loop.pending_approvals[0]
        await asyncio.sleep(0.01)
    raise AssertionError("no call waits for approval")


def of_type(events, kind):
    return [e for e in events if e.type == kind]


async def test_ask_waits_for_approval_then_runs_the_call(make_harness, tools, model_server,
                                                        workspace):  # fmt: skip
    loop, events = make_harness(tools=tools, approval="ask")
    model_server.enqueue(
        tool_reply(("read", {"path": "notes.txt"}), ("write", {"path": "x.txt", "content": "hi"})),
        text_reply("written"),
    )  # fmt: skip
    task = asyncio.create_task(loop.prompt("go"))
    call_id = await waiting(loop)
    # The read ran at once; the write waits, announced, and has not run.
    assert [e.isError for e in of_type(events, "tool_result")] == [False]
    (approval,) = of_type(events, "approval")
    assert (approval.id, approval.name) == (call_id, "write")
    assert approval.input == {"path": "x.txt", "content": "hi"}
    assert events[-1].type == "status" and events[-1].state == "waiting_input"
    assert not (workspace.root / "x.txt").exists()
    assert loop.decide("nope", "approve") == "unknown"
    assert loop.decide(call_id, "approve", by="alice") == "decided"
    assert loop.decide(call_id, "approve", by="bob") == "already"
    result = await asyncio.wait_for(task, 20)
    assert result.state == "idle"
    assert (workspace.root / "x.txt").read_text() == "hi"
    (decision,) = of_type(events, "approval_decision")
    assert decision.to_dict()["by"] == "alice" and decision.decision == "approve"
    assert "reason" not in decision.to_dict()
    assert loop.decide(call_id, "deny") == "already"
    assert_valid_history(loop.messages)


async def test_a_denied_call_gives_the_reason_to_the_model_and_the_loop_goes_on(
    make_harness, tools, model_server, workspace
):
    loop, events = make_harness(tools=tools, approval="ask")
    model_server.enqueue(
        tool_reply(("bash", {"command": "touch y.txt"})), text_reply("ok, I will not")
    )
    task = asyncio.create_task(loop.prompt("go"))
    call_id = await waiting(loop)
    loop.decide(call_id, "deny", "use the read tool instead", by="alice")
    result = await asyncio.wait_for(task, 20)
    assert result.state == "idle"
    assert not (workspace.root / "y.txt").exists()
    (tool_result,) = of_type(events, "tool_result")
    assert tool_result.isError
    assert "use the read tool instead" in json.loads(tool_result.result)["error"]
    sent = model_server.bodies[-1]["messages"][-1]["content"][0]
    assert sent["is_error"] and "use the read tool instead" in sent["content"]
    assert of_type(events, "approval_decision")[0].reason == "use the read tool instead"
    assert of_type(events, "text")[-1].content == "ok, I will not"


async def test_approve_all_approves_the_runs_later_calls(make_harness, tools, model_server,
                                                        workspace):  # fmt: skip
    loop, events = make_harness(tools=tools, approval="ask")
    model_server.enqueue(
        tool_reply(("write", {"path": "a.txt", "content": "a"})),
        tool_reply(("write", {"path": "b.txt", "content": "b"})),
        text_reply("both"),
    )  # fmt: skip
    task = asyncio.create_task(loop.prompt("go"))
    loop.decide(await waiting(loop), "approve", approve_all=True)
    assert (await asyncio.wait_for(task, 20)).state == "idle"
    assert len(of_type(events, "approval")) == 1
    assert (workspace.root / "b.txt").read_text() == "b"
    # The next run asks again.
    model_server.enqueue(tool_reply(("write", {"path": "c.txt", "content": "c"})), text_reply("c"))
    task = asyncio.create_task(loop.prompt("again"))
    loop.decide(await waiting(loop), "deny")
    assert (await asyncio.wait_for(task, 20)).state == "idle"
    assert not (workspace.root / "c.txt").exists()


async def test_cancel_ends_the_wait_and_the_call_is_not_run(make_harness, tools, model_server,
                                                           workspace):  # fmt: skip
    loop, events = make_harness(tools=tools, approval="ask")
    model_server.enqueue(tool_reply(("write", {"path": "x.txt", "content": "no"})))
    task = asyncio.create_task(loop.prompt("go"))
    call_id = await waiting(loop)
    assert loop.cancel()
    result = await asyncio.wait_for(task, 20)
    assert (result.state, result.code) == ("error", "cancelled")
    assert not (workspace.root / "x.txt").exists()
    assert loop.pending_approvals == [] and loop.decide(call_id, "approve") == "unknown"
    assert of_type(events, "tool_result")[0].isError
    assert not of_type(events, "approval_decision")
    assert_valid_history(loop.messages)


async def test_read_only_does_not_offer_the_tools_that_change_things(
    make_harness, tools, model_server
):
    loop, _ = make_harness(tools=tools, approval="read_only")
    model_server.enqueue(text_reply("fine"))
    await loop.prompt("go")
    offered = {tool["name"] for tool in model_server.bodies[-1]["tools"]}
    assert offered == {"read", "grep", "list_dir"}


async def test_auto_runs_every_tool_at_once(make_harness, tools, model_server, workspace):
    loop, events = make_harness(tools=tools)
    model_server.enqueue(
        tool_reply(("write", {"path": "x.txt", "content": "hi"})), text_reply("ok")
    )
    assert (await loop.prompt("go")).state == "idle"
    assert (workspace.root / "x.txt").read_text() == "hi"
    assert not of_type(events, "approval") and "waiting_input" not in [
        e.state for e in of_type(events, "status")
    ]
    offered = {tool["name"] for tool in model_server.bodies[0]["tools"]}
    assert {"write", "edit", "bash"} <= offered


async def test_an_approver_decides_instead(make_harness, tools, model_server, workspace):
    asked = []

    async def approver(call):
        asked.append(call)
        return Decision("deny", "not now", "terminal")

    loop, events = make_harness(tools=tools, approval="ask")
    loop.approver = approver
    model_server.enqueue(tool_reply(("edit", {"path": "notes.txt", "old_str": "some",
                                              "new_str": "many"})), text_reply("ok"))  # fmt: skip
    assert (await loop.prompt("go")).state == "idle"
    assert [c["name"] for c in asked] == ["edit"]
    assert (workspace.root / "notes.txt").read_text() == "some notes"
    assert of_type(events, "approval_decision")[0].by == "terminal"


async def test_an_edit_waiting_shows_the_diff_it_will_make_without_making_it(
    make_harness, tools, model_server, workspace
):
    (workspace.root / "code.py").write_text("a = 1\nb = 2\nc = 3\n")
    loop, events = make_harness(tools=tools, approval="ask")
    model_server.enqueue(tool_reply(("edit", {"path": "code.py", "old_str": "b = 2",
                                              "new_str": "b = 20"})), text_reply("ok"))  # fmt: skip
    task = asyncio.create_task(loop.prompt("go"))
    call_id = await waiting(loop)
    (approval,) = of_type(events, "approval")
    diff = approval.to_dict()["display"]["diff"]
    assert "-b = 2\n+b = 20\n" in diff and " a = 1\n" in diff  # the file's lines around it
    assert (workspace.root / "code.py").read_text() == "a = 1\nb = 2\nc = 3\n"  # not yet
    loop.decide(call_id, "approve")
    await asyncio.wait_for(task, 20)
    assert (workspace.root / "code.py").read_text() == "a = 1\nb = 20\nc = 3\n"
