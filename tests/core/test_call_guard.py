"""The loop's guard (a budget, in the server) is asked before every model call of a run, not
once per prompt: the turns of a delivered follow-up or steer, an automatic compaction and a
compaction asked for. A refusal ends the run with its error before the model is asked."""

from __future__ import annotations

import pytest

from agent.core.config import Config
from agent.core.loop import AgentLoop, CallRefused
from testkit.model_server import message_reply, text_reply, tool_reply
from tests.core.test_compaction import long_history, small_window
from tests.core.test_history import answer, user
from tests.core.test_queues import GateTool, while_gate_runs

SPENT = "This month's budget is spent."


class Allowance:
    """Lets ``calls`` model calls through, then refuses every one."""

    def __init__(self, calls: int):
        self.left, self.asked = calls, 0

    async def __call__(self) -> None:
        self.asked += 1
        if self.left <= 0:
            raise CallRefused("budget_exceeded", SPENT)
        self.left -= 1


def refused_at_the_end(events) -> None:
    error, status = events[-2:]
    assert (error.type, error.code, error.message) == ("error", "budget_exceeded", SPENT)
    assert (status.type, status.state) == ("status", "error")


@pytest.mark.parametrize("mode", ["follow_up", "steer"])
async def test_a_queued_prompt_past_the_budget_never_reaches_the_model(
    provider, model_server, mode
):
    gate, events, guard = GateTool(), [], Allowance(2)
    loop = AgentLoop(provider, [gate], Config(api_key="k"), events.append, guard=guard)
    model_server.enqueue(tool_reply(("gate", {})), text_reply("first done"))
    if mode == "steer":  # (delivered after the tool: the turn it ends is the second call)
        guard.left = 1
    await while_gate_runs(loop, gate, then=lambda: loop.queue("and more", mode))
    assert len(model_server.requests) == guard.asked - 1  # the last one asked was refused
    assert [e.content for e in events if e.type == "user"] == ["go", "and more"]
    refused_at_the_end(events)
    if mode == "follow_up":  # taken back out: a later prompt is not doubled with it
        assert "and more" not in str(loop.messages)


async def test_an_automatic_compaction_past_the_budget_is_not_made(provider, model_server):
    events = []
    loop = AgentLoop(provider, [], small_window(), events.append, messages=long_history(3),
                     guard=Allowance(0))  # fmt: skip
    model_server.enqueue(message_reply("summary"), text_reply("ok"))
    assert (await loop.prompt("next")).code == "budget_exceeded"
    assert model_server.requests == []
    refused_at_the_end(events)


async def test_a_compaction_asked_for_past_the_budget_is_not_made(provider, model_server):
    events = []
    history = [user("first"), answer("one"), user("second"), answer("two"), user("third"),
               answer("three")]  # fmt: skip
    loop = AgentLoop(provider, [], Config(api_key="k"), events.append, messages=history,
                     guard=Allowance(0))  # fmt: skip
    assert (await loop.compact()).code == "budget_exceeded"
    assert model_server.requests == [] and loop.messages == history
    refused_at_the_end(events)
