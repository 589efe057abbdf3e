"""Compaction through the real SDK against the test model server: the
model summarises the older messages in a non-streamed, metered call; later calls send the
summary in their place; tool_use / tool_result pairs are never split; and a history that
cannot fit even then ends the run with a clear error, never a silently shortened one."""

from __future__ import annotations

from agent.core import compaction
from agent.core.config import Config
from agent.core.loop import AgentLoop
from testkit.model_server import message_reply, text_reply, tool_reply
from tests.core.test_history import answer, assistant_tool, results, user
from tests.history_check import assert_valid_history

BIG = "x" * 6000


def long_history(exchanges: int) -> list[dict]:
    messages = []
    for i in range(exchanges):
        messages += [user(f"prompt {i} {BIG}"), assistant_tool(f"t{i}"), results(f"t{i}", BIG),
                     answer(f"done {i}")]  # fmt: skip
    return messages


def small_window(**more) -> Config:
    return Config(api_key="k", max_tokens=1000, context_window=12_000, compact_at=0.8, **more)


async def test_a_history_near_the_window_is_compacted_before_the_call(provider, model_server):
    events = []
    loop = AgentLoop(provider, [], small_window(), events.append, messages=long_history(3))
    model_server.enqueue(message_reply("They asked three things; all done."), text_reply("ok"))
    assert (await loop.prompt("next")).state == "idle"
    summary_call, answer_call = model_server.bodies
    assert not summary_call.get("stream")  # not streamed
    assert summary_call["messages"][-1]["content"][-1]["text"] == compaction.INSTRUCTIONS
    assert summary_call["max_tokens"] == compaction.SUMMARY_MAX_TOKENS
    sent = answer_call["messages"]
    assert sent[0]["content"][0]["text"].startswith(compaction.SUMMARY_PREFIX)
    assert "They asked three things" in sent[0]["content"][0]["text"]
    assert_valid_history(sent)
    assert len(str(sent)) < len(str(long_history(3)))
    assert all("_seq" not in m for m in sent)  # the loop's own keys never reach the API
    kinds = [e.type for e in events]
    assert kinds.index("compaction") < kinds.index("text")
    done = next(e for e in events if e.type == "compaction")
    assert done.summary == "They asked three things; all done."
    assert done.tokens_after < done.tokens_before
    usages = [e for e in events if e.type == "usage"]
    assert usages[0].input_tokens == 500 and usages[0].cost_usd > 0  # the summary is metered
    assert usages[-1].context_window == 12_000 and usages[-1].context_tokens > 0


async def test_a_compaction_asked_for_keeps_the_last_exchanges(provider, model_server):
    events = []
    history = [user("first"), answer("one"), user("second"), answer("two"), user("third"),
               answer("three")]  # fmt: skip
    loop = AgentLoop(provider, [], Config(api_key="k"), events.append, messages=history)
    model_server.enqueue(message_reply("The user said first."))
    assert (await loop.compact()).state == "idle"
    assert [e.type for e in events] == ["status", "usage", "compaction", "status"]
    kept = loop.messages
    assert kept[0]["content"][0]["text"].endswith("The user said first.")
    assert kept[0]["content"][1]["text"] == "second" and kept[-1] == answer("three")
    assert_valid_history(compaction.for_request(kept))


async def test_nothing_to_compact_is_said_and_changes_nothing(provider, model_server):
    events = []
    history = [user("only"), answer("one")]
    loop = AgentLoop(provider, [], Config(api_key="k"), events.append, messages=history)
    assert (await loop.compact()).state == "idle"
    assert [(e.type, getattr(e, "code", None)) for e in events][1] == (
        "error",
        "nothing_to_compact",
    )
    assert events[-1].state == "idle" and model_server.requests == [] and loop.messages == history


async def test_a_history_that_cannot_fit_ends_with_a_clear_error(provider, model_server):
    events = []
    loop = AgentLoop(provider, [], small_window(), events.append,
                     messages=[user("a"), answer("b")])  # fmt: skip
    model_server.enqueue(message_reply("short"))
    result = await loop.prompt("huge " + "y" * 60_000)
    assert result.state == "error" and result.code == "context_too_large"
    assert len(model_server.requests) == 1  # the summary only: no shortened history was sent
    error = next(e for e in events if e.type == "error")
    assert "context window" in error.message


async def test_a_compaction_mid_run_never_separates_a_tool_call_from_its_result(
    provider, model_server, workspace
):
    from agent.core.tools import build_tools

    (workspace.root / "big.txt").write_text(BIG)
    loop = AgentLoop(provider, build_tools(workspace, "off"), small_window(), None,
                     messages=long_history(3))  # fmt: skip
    model_server.enqueue(
        message_reply("summary"),
        tool_reply(("read", {"path": "big.txt"})),
        text_reply("done"),
    )
    await loop.prompt("read it twice")
    assert sum(not body.get("stream") for body in model_server.bodies) >= 1  # it compacted
    for body in model_server.bodies:
        if body.get("stream"):
            assert_valid_history(body["messages"])


def test_cut_points_fall_only_before_an_assistant_turn_or_a_prompt():
    messages = long_history(2)
    for keep in (0, 100, 10_000, 10**9):
        cut = compaction.cut_point(messages, keep)
        assert cut is not None
        rest = compaction.compacted(messages, cut, "s")
        assert_valid_history(rest)
    assert compaction.cut_point([user("only")], 0) is None
    assert compaction.cut_point(messages, 10**9, keep_exchanges=2) is None  # two exchanges


async def test_the_next_prompt_starts_from_the_last_measured_count(provider, model_server):
    """The first-use review: a new run had no count and estimated from characters (3.5 a
    token), so a conversation whose last call filled 95% of the window with dense content
    was sent again uncompacted. The loop marks the count on the history it is kept with."""
    history = long_history(2)  # ~24,500 characters: ~8,000 tokens by the character estimate
    events = []
    loop = AgentLoop(provider, [], small_window(), events.append, messages=list(history))
    model_server.enqueue(text_reply("plain"))
    assert (await loop.prompt("by characters it fits")).state == "idle"
    assert [e.type for e in events].count("compaction") == 0
    # The call's measured input is marked on the last message it was made of (never sent).
    marked = [m for m in loop.messages if compaction.MEASURED in m]
    usage = next(e for e in events if e.type == "usage")
    assert marked == [loop.messages[-2]] and marked[0][compaction.MEASURED] == usage.context_tokens
    assert all(compaction.MEASURED not in m for m in model_server.bodies[-1]["messages"])

    # The same history as stored after a call the API counted at 95% of the window (dense
    # content): the next prompt, in a new run, compacts first.
    dense = [*history[:-1], {**history[-1], compaction.MEASURED: 11_400}]
    events.clear()
    model_server.reset()
    model_server.enqueue(message_reply("Two things were done."), text_reply("ok"))
    loop = AgentLoop(provider, [], small_window(), events.append, messages=dense)
    assert (await loop.prompt("next")).state == "idle"
    kinds = [e.type for e in events]
    assert "compaction" in kinds and kinds.index("compaction") < kinds.index("text")
    assert not model_server.bodies[0].get("stream")  # the summary came first
    # The kept messages carry no stale mark (it measured what is now summarised).
    assert [m for m in loop.messages if compaction.MEASURED in m] == [loop.messages[-2]]
