"""The offline demo model streams real events, and real tool calls, through the loop."""

from __future__ import annotations

import json

from agent.core.config import Config
from agent.core.loop import AgentLoop
from agent.core.model.demo import DemoProvider, plan, summarize
from agent.core.tools import build_tools
from tests.history_check import assert_valid_history


async def run_demo(workspace, prompt, bash_mode="off"):
    events = []
    harness = AgentLoop(DemoProvider(delay=0), build_tools(workspace, bash_mode), Config(),
                        events.append)  # fmt: skip
    result = await harness.prompt(prompt)
    return result, events, harness


async def test_demo_streams_markdown_labelled_offline(workspace):
    result, events, _ = await run_demo(workspace, "hello there")
    assert result.state == "idle"
    deltas = [e for e in events if e.type == "text_delta"]
    text = next(e for e in events if e.type == "text").content
    assert len(deltas) > 20 and "".join(d.content for d in deltas) == text
    assert "Offline demo model" in text and "```python" in text and "**bold**" in text
    usage = next(e for e in events if e.type == "usage")
    assert usage.cost_usd == 0.0 and usage.input_tokens > 0


async def test_demo_makes_real_tool_calls_into_the_workspace(workspace):
    (workspace.root / "notes.md").write_text("# Notes\nTODO: ship it\n")
    result, events, harness = await run_demo(workspace, "read notes.md")
    call = next(e for e in events if e.type == "tool_call")
    assert call.name == "read" and call.input == {"path": "notes.md"}
    tool_result = next(e for e in events if e.type == "tool_result")
    assert json.loads(tool_result.result) == {"content": "# Notes\nTODO: ship it\n"}
    assert "TODO: ship it" in [e for e in events if e.type == "text"][-1].content
    assert_valid_history(harness.messages + [{"role": "user", "content": "x"}])


async def test_demo_write_then_edit_changes_files(workspace):
    await run_demo(workspace, "write hello.py")
    assert "Hello from Harness" in (workspace.root / "hello.py").read_text()
    _, events, _ = await run_demo(workspace, "edit hello.py")
    assert "Hello again from Harness" in (workspace.root / "hello.py").read_text()
    assert next(e for e in events if e.type == "tool_result").display["kind"] == "diff"


async def test_demo_reports_tool_errors(workspace):
    _, events, _ = await run_demo(workspace, "read missing.txt")
    assert "file not found" in [e for e in events if e.type == "text"][-1].content


def test_demo_says_what_became_of_a_background_command():
    """A server's preview address is named; a job that listens on nothing is running, not
    "nothing found"; a failed one names the last line of its output (where the why is)."""
    uses = {"t": {"name": "bash"}}
    address = "/preview/5aa9cef4-fe81-47fc-a1a0-5bb3bfd9e690/8000/"
    serving = {"job": 1, "running": True, "ports": [{"port": 8000, "preview": address}]}
    said = summarize([{"tool_use_id": "t", "content": json.dumps(serving)}], uses)
    # the address as code: a relative link in model text would lose its href (markdown.py)
    assert f"(job 1), listening on port 8000 (`{address}`)" in said and "](" not in said
    waiting = {"job": 4, "running": True, "exit_code": None, "output": "", "ports": []}
    said = summarize([{"tool_use_id": "t", "content": json.dumps(waiting)}], uses)
    assert "runs in the background (job 4) but listens on no port yet" in said
    failed = {
        "error": "the background command exited with status 1",
        "job": 2,
        "output": "Traceback (most recent call last):\nOSError: Address in use\n\n",
    }
    said = summarize([{"tool_use_id": "t", "is_error": True, "content": json.dumps(failed)}], uses)
    assert said.endswith("status 1**; its output ends with `OSError: Address in use`")


def test_demo_plans_only_enabled_tools():
    assert plan("run ls", {"read"})[1] is None
    assert plan("run ls", {"bash"})[1] == ("bash", {"command": "ls"})
    assert plan("grep TODO", {"grep"})[1] == (
        "grep", {"pattern": "TODO", "path": ".", "recursive": True},
    )  # fmt: skip


async def test_demo_answers_the_new_prompt_after_a_stop_not_the_cut_short_call(workspace):
    """After Stop, the cancelled call's result and the next prompt are one user message:
    the demo answered "`bash` reported an error: cancelled" to "list files"."""
    (workspace.root / "seen.txt").write_text("x")
    history = [
        {"role": "user", "content": [{"type": "text", "text": "run sleep 10"}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "sleep 10"}},
        ]},  # fmt: skip
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": '{"error": "cancelled"}', "is_error": True}]},
    ]  # fmt: skip
    events = []
    result = await AgentLoop(
        DemoProvider(delay=0),
        build_tools(workspace, "off"),
        Config(),
        events.append,
        messages=history,
    ).prompt("list files")
    assert result.state == "idle"
    call = next(e for e in events if e.type == "tool_call")
    assert call.name == "list_dir"
    texts = " ".join(e.content for e in events if e.type == "text")
    assert "seen.txt" in texts and "cancelled" not in texts
