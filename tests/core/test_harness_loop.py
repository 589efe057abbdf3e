"""The agent loop against the test model server through the real SDK."""

from __future__ import annotations

import asyncio
import json

import pytest

from agent.core.config import Config
from agent.core.loop import AgentLoop, PromptAlreadyRunning
from agent.core.system_prompt import build_system_prompt
from agent.core.tools import build_tools
from testkit.model_server import (
    PING,
    Stream,
    message_end,
    message_start,
    text_block,
    text_reply,
    thinking_block,
    tool_block,
    tool_reply,
)
from tests.conftest import types
from tests.history_check import assert_valid_history


def final_statuses(events):
    return [e for e in events if e.type == "status" and e.state in ("idle", "error")]


async def test_text_only_response_ends_after_one_turn(make_harness, model_server):
    harness, events = make_harness()
    model_server.enqueue(text_reply("Hello **there**."))
    result = await harness.prompt("hi")
    assert result.state == "idle"
    assert types(events) == ["user", "status", "text", "usage", "status"]
    assert [e.state for e in events if e.type == "status"] == ["thinking", "idle"]
    assert events[-1].state == "idle" and len(model_server.requests) == 1
    text = next(e for e in events if e.type == "text")
    assert text.content == "Hello **there**."


async def test_text_deltas_stream_before_the_block_completes(make_harness, model_server):
    harness, events = make_harness()
    model_server.enqueue(text_reply("a fairly long sentence to split into deltas"))
    await harness.prompt("hi")
    kinds = types(events, deltas=True)
    first_delta, text_at = kinds.index("text_delta"), kinds.index("text")
    assert first_delta < text_at and kinds.count("text_delta") > 3
    deltas = "".join(e.content for e in events if e.type == "text_delta")
    assert deltas == "a fairly long sentence to split into deltas"


async def test_single_tool_call_runs_and_the_loop_continues(make_harness, model_server, workspace):
    (workspace.root / "notes.txt").write_text("remember the milk")
    harness, events = make_harness()
    model_server.enqueue(tool_reply(("read", {"path": "notes.txt"})), text_reply("Milk."))
    assert (await harness.prompt("what do my notes say?")).state == "idle"
    assert len(model_server.requests) == 2
    second = model_server.bodies[1]["messages"]
    assert_valid_history(second)
    result_block = second[-1]["content"][0]
    assert result_block["type"] == "tool_result" and result_block["is_error"] is False
    assert json.loads(result_block["content"]) == {"content": "remember the milk"}


async def test_multiple_tool_calls_run_sequentially_in_order(make_harness, model_server, workspace):
    harness, events = make_harness()
    model_server.enqueue(
        tool_reply(("write", {"path": "a.txt", "content": "first"}), ("read", {"path": "a.txt"})),
        text_reply("done"),
    )
    await harness.prompt("write then read")
    results = [e for e in events if e.type == "tool_result"]
    assert [r.isError for r in results] == [False, False]
    assert json.loads(results[1].result) == {"content": "first"}  # read saw the write
    tool_results = model_server.bodies[1]["messages"][-1]["content"]
    assert [b["type"] for b in tool_results] == ["tool_result", "tool_result"]  # one message


async def test_first_tool_error_skips_the_rest_fail_fast(make_harness, model_server, workspace):
    harness, events = make_harness()
    model_server.enqueue(
        tool_reply(("read", {"path": "missing.txt"}), ("write", {"path": "b.txt", "content": "x"})),
        text_reply("I see the file is missing."),
    )
    result = await harness.prompt("go")
    assert result.state == "idle"  # a tool error goes to the agent, it is not a run error
    assert not (workspace.root / "b.txt").exists()
    results = [e for e in events if e.type == "tool_result"]
    assert [r.isError for r in results] == [True, True]
    assert "skipped" in results[1].result
    sent = model_server.bodies[1]["messages"][-1]["content"]
    assert [b["is_error"] for b in sent] == [True, True]
    assert [e.state for e in events if e.type == "status"].count("running_tool") == 1


async def test_max_turns_stops_the_loop(make_harness, model_server):
    harness, events = make_harness(max_turns=3)
    model_server.enqueue(*[tool_reply(("list_dir", {"path": "."})) for _ in range(4)])
    result = await harness.prompt("loop forever")
    assert len(model_server.requests) == 3
    assert result.code == "max_turns" and result.state == "idle"
    assert [e.code for e in events if e.type == "error"] == ["max_turns"]
    assert final_statuses(events) == [events[-1]] and events[-1].state == "idle"
    assert_valid_history(harness.messages)


async def test_event_order_is_text_then_tool_call_then_tool_result(make_harness, model_server):
    harness, events = make_harness()
    model_server.enqueue(tool_reply(("list_dir", {"path": "."}), text="Looking."), text_reply("ok"))
    await harness.prompt("look")
    order = [t for t in types(events) if t in ("text", "tool_call", "tool_result")]
    assert order == ["text", "tool_call", "tool_result", "text"]


async def test_second_prompt_while_running_is_refused(make_harness, model_server):
    harness, events = make_harness()
    model_server.enqueue(text_reply("slow answer " * 20, delay=0.02))
    first = asyncio.create_task(harness.prompt("one"))
    await asyncio.sleep(0.1)
    assert harness.running
    with pytest.raises(PromptAlreadyRunning):
        await harness.prompt("two")
    assert (await first).state == "idle"
    assert [e.content for e in events if e.type == "user"] == ["one"]


async def test_cancel_when_idle_is_a_noop(make_harness, model_server):
    harness, events = make_harness()
    assert harness.cancel() is False
    model_server.enqueue(text_reply("fine"))
    assert (await harness.prompt("still works")).state == "idle"


async def test_cancel_mid_stream_keeps_partial_text_and_next_prompt_works(
    make_harness, model_server
):
    harness, events = make_harness()
    model_server.enqueue(text_reply("word " * 200, delay=0.01), text_reply("second answer"))
    task = asyncio.create_task(harness.prompt("long please"))
    while not any(e.type == "text_delta" for e in events):
        await asyncio.sleep(0.01)
    assert harness.cancel() is True
    result = await task
    assert result.state == "error" and result.code == "cancelled"
    assert [e.code for e in events if e.type == "error"] == ["cancelled"]
    assert final_statuses(events) == [events[-1]] and events[-1].state == "error"
    partial = [e.content for e in events if e.type == "text"]
    assert len(partial) == 1 and partial[0].startswith("word ") and len(partial[0]) < 1000
    assert not harness.running
    assert (await harness.prompt("next")).state == "idle"
    assert_valid_history(model_server.bodies[-1]["messages"])
    assert model_server.bodies[-1]["messages"][1]["content"][0]["text"] == partial[0]


async def test_cancel_during_a_tool_stops_it_and_closes_the_tool_call(
    make_harness, model_server, workspace
):
    harness, events = make_harness(tools=build_tools(workspace, "unsafe"), api_key="test-key")
    model_server.enqueue(
        tool_reply(("bash", {"command": "sleep 30; touch late.txt"}), ("list_dir", {"path": "."}))
    )
    model_server.enqueue(text_reply("after"))
    task = asyncio.create_task(harness.prompt("sleep"))
    while not any(e.type == "status" and e.state == "running_tool" for e in events):
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    harness.cancel()
    result = await task
    assert loop.time() - started < 1.0 and result.code == "cancelled"
    ran, not_run = [e for e in events if e.type == "tool_result"]
    # The running call did run (for a while): its result says so; the next never ran.
    assert ran.isError and "cancelled by the user while it ran" in ran.result
    assert not_run.isError and "cancelled by the user before it ran" in not_run.result
    await harness.prompt("go on")
    assert_valid_history(model_server.bodies[-1]["messages"])
    assert not (workspace.root / "late.txt").exists()


async def test_nil_event_handler_is_valid(provider, workspace, model_server):
    harness = AgentLoop(provider, build_tools(workspace, "off"), Config(api_key="k"), None)
    model_server.enqueue(tool_reply(("list_dir", {"path": "."})), text_reply("silent"))
    assert (await harness.prompt("quietly")).state == "idle"
    assert len(harness.messages) == 4


async def test_a_failing_event_handler_does_not_break_the_run(provider, workspace, model_server):
    def broken(event):
        raise RuntimeError("handler bug")

    harness = AgentLoop(provider, [], Config(api_key="k"), broken)
    model_server.enqueue(text_reply("still fine"))
    assert (await harness.prompt("hi")).state == "idle"


async def test_all_tools_are_registered_in_every_request(make_harness, model_server):
    harness, _ = make_harness()
    model_server.enqueue(tool_reply(("list_dir", {"path": "."})), text_reply("ok"))
    await harness.prompt("hi")
    for body in model_server.bodies:
        names = [t["name"] for t in body["tools"]]
        assert names == ["read", "grep", "list_dir", "write", "edit", "bash"]
        assert all(t["input_schema"]["type"] == "object" for t in body["tools"])
        assert body["tool_choice"] == {"type": "auto"}
        assert body["stream"] is True and body["max_tokens"] == 4096
    read = next(t for t in model_server.bodies[0]["tools"] if t["name"] == "read")
    assert read["input_schema"]["required"] == ["path"]


async def test_history_is_kept_across_prompts(make_harness, model_server):
    harness, _ = make_harness()
    model_server.enqueue(text_reply("first answer"), text_reply("second answer"))
    await harness.prompt("first")
    await harness.prompt("second")
    messages = model_server.bodies[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [{"type": "text", "text": "first answer"}]
    assert_valid_history(messages)


async def test_seq_numbers_are_consecutive_and_continue_across_prompts(
    provider, workspace, model_server
):
    events = []
    harness = AgentLoop(provider, [], Config(api_key="k"), events.append, next_seq=41)
    model_server.enqueue(text_reply("one"), text_reply("two"))
    await harness.prompt("a")
    await harness.prompt("b")
    assert [e.seq for e in events] == list(range(41, 41 + len(events)))
    assert all(isinstance(e.timestamp, int) and e.timestamp > 1_700_000_000_000 for e in events)


async def test_usage_event_reports_tokens_and_cost(make_harness, model_server):
    harness, events = make_harness(model="claude-haiku-4-5")
    model_server.enqueue(
        Stream(
            [message_start(input_tokens=1000), *text_block(0, "x"), *message_end(output_tokens=500)]
        )
    )
    await harness.prompt("count")
    usage = next(e for e in events if e.type == "usage").to_dict()
    assert usage["input_tokens"] == 1000 and usage["output_tokens"] == 500
    assert usage["cost_usd"] == pytest.approx(1000 * 1e-6 + 500 * 5e-6)
    assert {"cache_read_input_tokens", "cache_creation_input_tokens"} <= set(usage)


async def test_thinking_becomes_reasoning_and_goes_back_with_its_signature(
    make_harness, model_server
):
    harness, events = make_harness(thinking_budget=1024, max_tokens=4096)
    model_server.enqueue(
        Stream([message_start(), *thinking_block(0, "Let me think.", "c2lnbmF0dXJl"),
                *tool_block(1, "list_dir", {"path": "."}), *message_end("tool_use")]),
        text_reply("done"),
    )  # fmt: skip
    await harness.prompt("think")
    assert model_server.bodies[0]["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert [e.content for e in events if e.type == "reasoning"] == ["Let me think."]
    sent = model_server.bodies[1]["messages"][1]["content"][0]
    assert sent == {"type": "thinking", "thinking": "Let me think.", "signature": "c2lnbmF0dXJl"}


async def test_pause_turn_continues_the_same_turn(make_harness, model_server):
    harness, events = make_harness()
    model_server.enqueue(
        Stream([message_start(), *text_block(0, "part one"), *message_end("pause_turn")]),
        text_reply("part two"),
    )
    assert (await harness.prompt("long job")).state == "idle"
    assert len(model_server.requests) == 2
    assert model_server.bodies[1]["messages"][-1]["role"] == "assistant"


async def test_unknown_tool_gets_an_error_result(make_harness, model_server):
    harness, events = make_harness()
    model_server.enqueue(tool_reply(("launch_rockets", {})), text_reply("sorry"))
    await harness.prompt("go")
    result = next(e for e in events if e.type == "tool_result")
    assert result.isError and "unknown tool" in result.result


async def test_tool_with_empty_partial_json_gets_empty_input(make_harness, model_server):
    harness, events = make_harness()
    model_server.enqueue(
        Stream([message_start(), *tool_block(0, "list_dir", {}, raw_json=""),
                *message_end("tool_use")]),
        text_reply("ok"),
    )  # fmt: skip
    await harness.prompt("go")
    call = next(e for e in events if e.type == "tool_call")
    assert call.input == {}


async def test_system_prompt_carries_identity_and_agents_md(provider, workspace, model_server):
    (workspace.root / "AGENTS.md").write_text("Always answer in haiku.")
    system = build_system_prompt(workspace.root, None)
    harness = AgentLoop(provider, [], Config(api_key="k"), None, system=system)
    model_server.enqueue(text_reply("ok"))
    await harness.prompt("hi")
    sent = model_server.bodies[0]["system"]
    assert "Harness" in sent and "Always answer in haiku." in sent
    custom = build_system_prompt(workspace.root, "You are a pirate.")
    assert custom.startswith("You are a pirate.") and "Always answer in haiku." in custom


async def test_unknown_events_and_block_types_are_tolerated(make_harness, model_server):
    harness, events = make_harness()
    odd_block = [
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "future_block", "x": 1}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "future_delta", "y": 2}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ]  # fmt: skip
    model_server.enqueue(
        Stream([message_start(), PING, ("future_event", {"type": "future_event"}),
                *odd_block, *text_block(1, "visible"), *message_end()])
    )  # fmt: skip
    assert (await harness.prompt("hi")).state == "idle"
    assert [e.content for e in events if e.type == "text"] == ["visible"]
    assert harness.messages[-1]["content"] == [{"type": "text", "text": "visible"}]
