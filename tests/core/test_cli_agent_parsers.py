"""The CLI agents' structured output as the core's events, on output
recorded from the real CLIs (Claude Code 2.1, Pi 0.73, OpenCode 1.18 and Codex 0.171 through
their pane loop)
against the test model server: a prompt whose answer runs one shell command, then answers."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from agent.core.cli_agents.providers import PROVIDERS, UnknownVersion

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cli_agents"


def parse(name: str, fixture: str):
    parser = PROVIDERS[name].parser()
    events = []
    for line in (FIXTURES / fixture).read_text().splitlines():
        events += parser.feed(line)
    return parser, events


@pytest.mark.parametrize(("name", "fixture", "tool"), [
    ("claude-code", "claude_code_tool_run.jsonl", "Bash"),
    ("pi", "pi_rpc_tool_run.jsonl", "bash"),
    ("opencode", "opencode_tool_run.jsonl", "bash"),
])  # fmt: skip
def test_a_recorded_tool_run_becomes_text_a_tool_card_and_usage(name, fixture, tool):
    parser, events = parse(name, fixture)
    kinds = [e.type for e in events if e.type != "usage"]
    assert kinds == ["text", "tool_call", "status", "tool_result", "status", "text"]
    assert events[0].content == "Running it."
    call = next(e for e in events if e.type == "tool_call")
    result = next(e for e in events if e.type == "tool_result")
    assert call.name == tool and call.input["command"] == "echo hello-from-tool"
    assert result.id == call.id and result.result.strip() == "hello-from-tool"
    assert not result.isError
    assert [e.state for e in events if e.type == "status"] == ["running_tool", "thinking"]
    assert [e for e in events if e.type == "text"][-1].content == "Done: **hello** printed."
    usage = [e for e in events if e.type == "usage"]
    assert usage and all(u.output_tokens > 0 and u.cost_usd > 0 for u in usage)
    assert parser.finished and parser.failed is None


@pytest.mark.parametrize("name", ["claude-code", "pi", "opencode", "codex"])
def test_hostile_lines_are_skipped_never_raised(name):
    parser = PROVIDERS[name].parser()
    hostile = ["", "not json", "[1, 2]", "null", '"text"', '{"type": 5}', "\x1b[31m{" + "x" * 9999]
    hostile += [json.dumps(m) for m in (
        {"type": "assistant", "message": {"content": "x"}},
        {"type": "assistant", "message": {"content": [5, {"type": "tool_use", "input": 3}]}},
        {"type": "message_end", "message": {"role": "assistant", "usage": {"input": -5, "cost": 7},
                                            "content": [{"type": "toolCall", "arguments": "x"}]}},
        {"type": "user", "message": {"content": [{"type": "tool_result",
                                                  "content": [{"type": "text", "text": 9}]}]}},
        {"type": "tool_use", "part": {"tool": 5, "state": {"input": [1], "output": 7}}},
        {"type": "step_finish", "part": {"tokens": {"input": True, "output": "9"}, "cost": -1}},
        {"type": "error", "error": "x"}, {"type": "harness_end", "code": "x", "session": 3},
        {"type": "item.completed", "item": {"type": "command_execution", "command": 5,
                                            "exit_code": "1", "aggregated_output": [1]}},
        {"type": "item.started", "item": {"type": "file_change", "changes": [3, {"path": 4}]}},
        {"type": "item.completed", "item": {"type": "mcp_tool_call", "arguments": 3,
                                            "error": "x", "result": None}},
        {"type": "turn.completed", "usage": {"input_tokens": -3, "cached_input_tokens": 99}},
        {"type": "turn.failed", "error": 5}, {"type": "thread.started", "thread_id": 5},
        {"type": "item.completed", "item": "x"}, {"type": "item.updated", "item": {"id": []}},
        {"method": "item/started", "params": {"item": {"type": "fileChange", "changes": [
            {"path": 1, "kind": []}, 5]}}},
        {"method": "item/completed", "params": {"item": {"type": "reasoning", "summary": 3}}},
        {"method": "item/commandExecution/requestApproval", "id": [1], "params": {"itemId": 5}},
        {"method": "item/fileChange/requestApproval", "id": None, "params": []},
        {"method": "turn/completed", "params": {"turn": {"status": "failed", "error": 3}}},
        {"method": "error", "params": {"error": "x"}}, {"method": 5, "params": None},
    )]  # fmt: skip
    for line in hostile:
        for event in parser.feed(line):
            json.dumps(event.to_dict())  # whatever comes out is a well-formed event


def test_opencode_continues_its_session_and_reports_a_failed_run():
    provider = PROVIDERS["opencode"]
    parser, _ = parse("opencode", "opencode_tool_run.jsonl")
    marker = provider.session_marker(parser)
    assert marker and marker.startswith("ses_")
    argv = provider.argv("/opt/cli/opencode", conversation_id="c", resume=marker,
                         model="claude-haiku-4-5")  # fmt: skip
    assert argv[-1] == marker and "anthropic/claude-haiku-4-5" in argv[-2]
    failed = provider.parser()
    error = {"name": "APIError", "data": {"message": "No run"}}
    failed.feed(json.dumps({"type": "error", "error": error}))
    failed.feed(json.dumps({"type": "harness_end", "code": 1, "signal": None}))
    assert failed.finished and failed.failed == "No run"
    crashed = provider.parser()
    crashed.feed(json.dumps({"type": "harness_end", "code": 3, "signal": None}))
    assert crashed.failed == "opencode exited with code 3"
    interrupted = provider.parser()
    interrupted.feed(json.dumps({"type": "harness_end", "code": None, "signal": "SIGINT"}))
    assert interrupted.finished and interrupted.failed is None


def test_a_recorded_codex_run_becomes_text_a_tool_card_and_continues_its_thread():
    provider = PROVIDERS["codex"]
    parser, events = parse("codex", "codex_tool_run.jsonl")
    kinds = [e.type for e in events if e.type != "usage"]
    assert kinds == ["text", "tool_call", "status", "tool_result", "status", "text"]
    call, result = events[1], events[3]
    assert call.name == "exec_command" and "echo hello-from-tool" in call.input["command"]
    assert result.id == call.id and result.result.strip() == "hello-from-tool"
    assert not result.isError and events[-2].content == "Done: **hello** printed."
    usage = events[-1]
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.output_tokens) == (12, 8, 6)
    assert parser.finished and parser.failed is None
    thread = provider.session_marker(parser)
    assert thread == "01a219dc-58af-7e33-a1b4-7ce5446349d5"
    argv = provider.argv("/opt/cli/codex", conversation_id="c", resume=thread,
                         model="claude-haiku-4-5")  # fmt: skip
    plan = json.loads(argv[-2])
    assert argv[-1] == thread and plan["session_key"] == "thread_id"
    assert plan["fresh"][0] == "exec" and plan["resume"][:2] == ["exec", "resume"]
    assert plan["resume"][-1] == "{session}" and "--json" in plan["resume"]
    assert plan["fresh"][plan["fresh"].index("--model") + 1] == "claude-haiku-4-5"
    # A failed turn (here: the key's variable unset) is the prompt's failure.
    failed, _ = parse("codex", "codex_failed_turn.jsonl")
    assert failed.finished and "HARNESS_LLM_KEY" in failed.failed
    crashed = provider.parser()
    crashed.feed(json.dumps({"type": "harness_end", "code": 3, "signal": None}))
    assert crashed.failed == "codex exited with code 3"
    recovered = provider.parser()
    for line in ({"type": "error", "message": "Reconnecting... 1/5"},
                 {"type": "turn.completed", "usage": {}},
                 {"type": "harness_end", "code": 0, "signal": None}):  # fmt: skip
        recovered.feed(json.dumps(line))
    assert recovered.finished and recovered.failed is None


def test_codexs_app_server_approval_request_becomes_a_card_and_its_answer_a_line():
    """In ``ask`` Codex runs as its app server behind the pane's bridge (recorded: a command
    asked for, approved, run; then the answer)."""
    provider = PROVIDERS["codex"]
    argv = provider.argv("/opt/cli/codex", conversation_id="c", resume="t-1", approval="ask",
                         model="claude-haiku-4-5")  # fmt: skip
    assert argv[:2] == ["node", "-e"] and "app-server" in argv[2] and argv[-1] == "t-1"
    assert json.loads(argv[-2]) == {"model": "claude-haiku-4-5"}
    parser, events = parse("codex", "codex_app_server_approval.jsonl")
    kinds = [e.type for e in events]
    assert kinds == ["tool_call", "status", "approval", "status", "tool_result", "status", "text"]
    call, card = events[0], events[2]
    assert card.id == call.id == "call_1" and card.name == "exec_command"
    assert "echo hi > f.txt" in card.input["command"] and events[3].state == "waiting_input"
    assert events[4].result == "hi\n" and events[-1].content == "Done"
    assert parser.finished and parser.failed is None
    assert provider.session_marker(parser) == "01a219e7-0c99-7142-84ed-fde6b2dad28f"
    request_id, call_input = parser.pending["call_1"]
    line = provider.approval_response(request_id, False, call_input, "no")
    assert json.loads(line) == {"type": "approval", "id": "0", "allow": False}
    declined = provider.parser()
    item = {"type": "commandExecution", "id": "c2", "command": "rm -rf /", "status": "declined"}
    events = declined.feed(json.dumps({"method": "item/completed", "params": {"item": item}}))
    assert events[2].isError and "declined" in events[2].result
    for message in ({"method": "turn/completed", "params": {"turn": {
                         "status": "failed", "error": {"message": "quota"}}}},
                    {"type": "harness_end", "code": 0, "signal": None}):  # fmt: skip
        declined.feed(json.dumps(message))
    assert declined.failed == "quota"


def test_codexs_config_points_its_provider_at_the_gateways_responses_api():
    files = PROVIDERS["codex"].config_files("http://127.0.0.1:47011/llm/anthropic")
    parsed = tomllib.loads(files[".codex/config.toml"])
    provider = parsed["model_providers"][parsed["model_provider"]]
    assert provider["base_url"] == "http://127.0.0.1:47011/llm/openai/v1"
    assert provider["wire_api"] == "responses"
    assert provider["env_key"] == "ANTHROPIC_API_KEY"  # the gateway's placeholder, no secret
    assert parsed["web_search"] == "disabled"  # a server-side tool the gateway refuses
    assert parsed["model_context_window"] == 200_000  # Claude's: Codex compacts in time


def test_a_failed_claude_turn_is_reported_as_the_failure():
    parser = PROVIDERS["claude-code"].parser()
    parser.feed(json.dumps({"type": "result", "subtype": "success", "is_error": True,
                            "result": "Not logged in"}))  # fmt: skip
    assert parser.finished and parser.failed == "Not logged in"


def test_a_prompt_is_one_json_line_whatever_its_newlines():
    for provider in PROVIDERS.values():
        line = provider.prompt_input('first\nsecond\r\n"quoted" \x1b[2J')
        assert line.endswith("\n") and line.count("\n") == 1 and "\x1b" not in line
        assert "first\\nsecond" in line


@pytest.mark.parametrize(("name", "output", "ok"), [
    ("claude-code", "2.1.197 (Claude Code)", True),
    ("claude-code", "3.0.0 (Claude Code)", False),
    ("pi", "0.73.1", True),
    ("pi", "1.0.0", False),
    ("pi", "garbage", False),
    ("opencode", "1.18.33", True),
    ("opencode", "2.0.0", False),
    ("codex", "codex-cli 0.171.0", True),
    ("codex", "codex-cli 1.0.0", False),
])  # fmt: skip
def test_unknown_major_versions_are_refused_with_a_clear_message(name, output, ok):
    provider = PROVIDERS[name]
    if ok:
        assert provider.parse_version(output) == re.search(r"\d+\.\d+\.\d+", output).group(0)
    else:
        with pytest.raises(UnknownVersion, match=name):
            provider.parse_version(output)


def test_the_command_variable_overrides_path(tmp_path):
    cli = tmp_path / "my-claude"
    cli.write_text("#!/bin/sh\necho 2.0.1\n")
    cli.chmod(0o755)
    provider = PROVIDERS["claude-code"]
    assert provider.find(
        {"PATH": "/nonexistent", "HARNESS_AGENT_CLAUDE_CODE_COMMAND": str(cli)}
    ) == str(cli)
    assert provider.find({"PATH": "/nonexistent"}) is None


def test_seed_pane_patterns_tell_idle_waiting_and_processing():
    provider = PROVIDERS["claude-code"]
    assert provider.pane_state("output\n> ") == "idle"
    assert provider.pane_state("Do you want to run this command?\n 1. Yes") == "waiting_input"
    assert provider.pane_state("✻ Thinking…") == "processing"


def test_claudes_permission_request_becomes_an_approval_card_and_its_answer_a_line():
    provider = PROVIDERS["claude-code"]
    parser = provider.parser()
    # As Claude Code 2.1 sends it with --permission-prompt-tool stdio (recorded).
    request = {"type": "control_request", "request_id": "req-1", "request": {
        "subtype": "can_use_tool", "tool_name": "Bash", "tool_use_id": "toolu_1",
        "input": {"command": "rm -rf build"}, "description": "clean"}}  # fmt: skip
    events = parser.feed(json.dumps(request))
    assert [e.type for e in events] == ["approval", "status"]
    card = events[0]
    assert (card.id, card.name, card.input) == ("toolu_1", "Bash", {"command": "rm -rf build"})
    assert events[1].state == "waiting_input"
    assert parser.pending == {"toolu_1": ("req-1", {"command": "rm -rf build"})}
    allow = json.loads(provider.approval_response("req-1", True, {"command": "x"}, None))
    deny = json.loads(provider.approval_response("req-1", False, {}, "no"))
    assert allow["response"]["response"] == {"behavior": "allow", "updatedInput": {"command": "x"}}
    assert deny["response"] == {"subtype": "success", "request_id": "req-1",
                                "response": {"behavior": "deny", "message": "no"}}  # fmt: skip
    assert "--dangerously-skip-permissions" not in provider.argv(
        "claude", conversation_id="c", resume=None, approval="ask")  # fmt: skip
