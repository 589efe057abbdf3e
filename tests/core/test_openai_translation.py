"""The Responses API ↔ Messages API translation of the model gateway (docs/API.md,
"/llm/openai/v1/responses"): requests as Codex 0.171 sends them (recorded), the answer's
events in the shapes Codex's client reads, and refusals, never a silent drop."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from agent.core.model.openai_request import Unsupported, translate
from agent.core.model.openai_stream import ResponseStream, error_body, reasoning_blob, sse
from testkit.model_server import (
    PING,
    error_event,
    message_end,
    message_start,
    text_block,
    thinking_block,
    tool_block,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "responses_api"


def recorded() -> dict:
    """A request of Codex 0.171.0 (its second call of a turn: a command ran), trimmed."""
    return json.loads((FIXTURES / "codex_0.171_second_call.json").read_text())


def run(translated, events) -> list[dict]:
    stream = ResponseStream(translated, "claude-haiku-4-5")
    out = stream.start()
    for name, data in events:
        out += stream.feed(name, data)
    return out + stream.finish()


def test_codex_s_recorded_request_becomes_a_messages_request():
    translated = translate(recorded())
    body = translated.body
    assert body["model"] == "claude-haiku-4-5" and body["stream"] is True
    assert body["max_tokens"] > 0
    # The developer messages before the conversation are the system prompt.
    assert body["system"].startswith("You are a coding agent running in the Codex CLI")
    assert "<permissions instructions>" in body["system"]
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user"]
    assert [b["text"] for b in body["messages"][0]["content"]][-1] == "run it"
    call = body["messages"][1]["content"][0]
    assert call == {"type": "tool_use", "id": "call_1", "name": "exec_command",
                    "input": {"cmd": "echo hi > f.txt; cat f.txt"}}  # fmt: skip
    result = body["messages"][2]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "call_1"
    assert result["content"].endswith("Output:\nhi\n")
    names = [t["name"] for t in body["tools"]]
    assert names == ["exec_command", "view_image", "multi_agent_v1__close_agent",
                     "multi_agent_v1__resume_agent"]  # fmt: skip
    assert body["tools"][0]["input_schema"]["properties"]["cmd"]["type"] == "string"
    assert translated.namespaced["multi_agent_v1__close_agent"] == ("multi_agent_v1",
                                                                    "close_agent")  # fmt: skip
    assert body["tool_choice"] == {"type": "auto"}  # parallel calls allowed, as Codex asked


def test_instructions_a_later_developer_message_and_images_keep_their_place():
    request = {
        "model": "m", "instructions": "Be brief.", "tool_choice": "required",
        "parallel_tool_calls": False, "max_output_tokens": 100, "temperature": 0.2,
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "input": [
            {"role": "user", "content": "look"},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "ok"}]},
            {"type": "message", "role": "developer", "content": "the cwd changed"},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "this"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]},
        ],
    }  # fmt: skip
    body = translate(request).body
    assert body["system"] == "Be brief."
    assert body["max_tokens"] == 100 and body["temperature"] == 0.2
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    last = body["messages"][-1]
    assert last["role"] == "user"
    assert last["content"][0] == {"type": "text",
                                  "text": "<developer>\nthe cwd changed\n</developer>"}  # fmt: skip
    assert last["content"][2]["source"] == {"type": "base64", "media_type": "image/png",
                                            "data": "iVBORw0KGgo="}  # fmt: skip


def test_a_freeform_tool_is_a_tool_with_one_string_input_and_its_call_comes_back_as_text():
    grammar = {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch"}
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"
    request = {"model": "m", "tools": [
        {"type": "custom", "name": "apply_patch", "description": "Edit files.", "format": grammar}],
        "input": [
            {"role": "user", "content": "patch"},
            {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": patch},
            {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done!"},
        ]}  # fmt: skip
    translated = translate(request)
    tool = translated.body["tools"][0]
    assert tool["input_schema"]["required"] == ["input"]
    assert "start: begin_patch" in tool["input_schema"]["properties"]["input"]["description"]
    assert translated.body["messages"][1]["content"][0]["input"] == {"input": patch}
    assert translated.body["messages"][2]["content"][0]["content"] == "Done!"
    # The model's call of it is a custom_tool_call whose input is the text itself.
    events = run(translated, [message_start(), PING,
                              *tool_block(0, "apply_patch", {"input": patch}, "toolu_9"),
                              *message_end("tool_use")])  # fmt: skip
    done = [e for e in events if e["type"] == "response.output_item.done"]
    item = done[0]["item"]
    assert item == {**item, "type": "custom_tool_call", "name": "apply_patch",
                    "call_id": "toolu_9", "input": patch, "status": "completed"}  # fmt: skip
    assert any(e["type"] == "response.custom_tool_call_input.done" for e in events)


def test_a_streamed_answer_becomes_the_responses_events_codex_reads_in_order():
    tool = {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}
    translated = translate({"model": "m", "input": "hi", "tools": [tool]})
    events = run(translated, [
        message_start(input_tokens=30), PING, *thinking_block(0, "Let me see.", "sig=="),
        *text_block(1, "Running it."), *tool_block(2, "exec_command", {"cmd": "ls"}, "toolu_1"),
        *message_end("tool_use", output_tokens=12)])  # fmt: skip
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert (
        kinds.count("response.output_item.added") == kinds.count("response.output_item.done") == 3
    )
    assert "response.reasoning_summary_text.delta" in kinds
    assert (
        "response.output_text.delta" in kinds and "response.function_call_arguments.delta" in kinds
    )
    # Every item's added comes before its deltas and its done (by output_index).
    for index in range(3):
        mine = [e["type"] for e in events if e.get("output_index") == index]
        assert mine[0] == "response.output_item.added" and mine[-1] == "response.output_item.done"
    items = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    reasoning, message, call = items
    assert reasoning["summary"] == [{"type": "summary_text", "text": "Let me see."}]
    thinking = json.loads(base64.b64decode(reasoning["encrypted_content"]))
    assert thinking == {"thinking": "Let me see.", "signature": "sig=="}
    assert message["content"] == [{"type": "output_text", "text": "Running it.",
                                   "annotations": []}]  # fmt: skip
    assert call == {**call, "type": "function_call", "call_id": "toolu_1", "name": "exec_command",
                    "status": "completed"}  # fmt: skip
    assert json.loads(call["arguments"]) == {"cmd": "ls"}
    response = events[-1]["response"]
    assert response["status"] == "completed" and response["output"] == items
    assert response["usage"] == {"input_tokens": 30, "input_tokens_details": {"cached_tokens": 0},
                                 "output_tokens": 12,
                                 "output_tokens_details": {"reasoning_tokens": 0},
                                 "total_tokens": 42}  # fmt: skip
    wire = sse(events[-1])
    assert wire.startswith(b"event: response.completed\ndata: {") and wire.endswith(b"\n\n")


def test_the_reasoning_item_goes_back_upstream_as_the_thinking_block_it_was():
    blob = reasoning_blob({"type": "thinking", "thinking": "Hmm.", "signature": "s1"})
    redacted = reasoning_blob({"type": "redacted_thinking", "data": "opaque"})
    body = translate({"model": "m", "input": [
        {"role": "user", "content": "q"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": blob},
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": redacted},
        {"type": "reasoning", "id": "rs_3", "summary": [{"type": "summary_text", "text": "x"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
    ]}).body  # fmt: skip
    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Hmm.", "signature": "s1"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "a"},
    ]


def test_reasoning_effort_turns_thinking_on_with_room_for_the_answer():
    body = translate({"model": "m", "input": "q", "reasoning": {"effort": "high"},
                      "temperature": 0.5, "max_output_tokens": 1000}).body  # fmt: skip
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    assert body["max_tokens"] > 16384 and "temperature" not in body


@pytest.mark.parametrize("request_, phrase", [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"background": True}, "background"),
    ({"tools": [{"type": "web_search"}]}, "'web_search' has no equivalent"),
    ({"tools": [{"type": "mcp", "server_url": "https://x"}]}, "'mcp' has no equivalent"),
    ({"tools": [{"type": "function", "name": "bad name!"}]}, "not valid upstream"),
    ({"tools": [{"type": "function", "name": "a"}, {"type": "function", "name": "a"}]}, "unique"),
    ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "structured output"),
    ({"input": [{"type": "web_search_call", "id": "ws"}]}, "'web_search_call' has no"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
     "'input_file' is not supported"),
    ({"input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "file:///etc/passwd"}]}]}, "data URL, or https"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}]},
     "not a JSON object"),
    ({"input": [{"type": "reasoning", "encrypted_content": "bm90IGpzb24="}]}, "not one this"),
    ({"input": [{"role": "tool", "content": "x"}]}, "role 'tool'"),
    ({"input": []}, "no message"),
    ({"reasoning": {"effort": "ultra"}}, "reasoning.effort"),
    ({"model": ""}, "model"),
    ({"max_output_tokens": -1}, "max_output_tokens"),
])  # fmt: skip
def test_what_has_no_equivalent_upstream_is_refused_by_name(request_, phrase):
    with pytest.raises(Unsupported) as refused:
        translate({"model": "m", "input": "hi", **request_})
    assert phrase in str(refused.value)


def test_a_request_that_is_not_an_object_is_refused():
    for value in (None, [], "text", 3):
        with pytest.raises(Unsupported):
            translate(value)


def test_an_upstream_error_mid_stream_is_a_failed_response_with_the_code_codex_acts_on():
    translated = translate({"model": "m", "input": "hi"})
    events = run(translated, [message_start(), *text_block(0, "par"),
                              error_event("invalid_request_error", "prompt is too long: 300000 "
                                          "tokens > 200000 maximum")])  # fmt: skip
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "context_length_exceeded"
    overloaded = run(
        translate({"model": "m", "input": "hi"}),
        [message_start(), error_event("overloaded_error", "Overloaded")],
    )
    assert overloaded[-1]["response"]["error"]["code"] == "server_is_overloaded"
    assert error_body("rate_limit_error", "slow down")["error"]["code"] == "rate_limit_exceeded"


def test_an_answer_that_breaks_off_fails_and_one_that_hit_its_limit_is_incomplete():
    broken = run(translate({"model": "m", "input": "hi"}), [message_start(), *text_block(0, "x")])
    assert broken[-1]["type"] == "response.failed"
    assert "broke off" in broken[-1]["response"]["error"]["message"]
    cut = run(
        translate({"model": "m", "input": "hi"}),
        [message_start(), *text_block(0, "long"), *message_end("max_tokens")],
    )
    assert cut[-1]["type"] == "response.incomplete"
    assert cut[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_hostile_upstream_events_are_skipped_never_raised():
    stream = ResponseStream(translate({"model": "m", "input": "hi"}))
    stream.start()
    junk = [None, [], "x", {"type": "content_block_delta", "index": 7, "delta": {}},
            {"type": "content_block_start", "index": "0", "content_block": {"type": "text"}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "image"}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta",
                                                                 "text": 5}},
            {"type": "content_block_stop", "index": None},
            {"type": "message_delta",
             "usage": {"output_tokens": -5, "input_tokens": True}}]  # fmt: skip
    for data in junk:
        assert stream.feed("content_block_delta", data) == []
    assert stream.usage == {}
    # A namespaced tool's call comes back with its namespace and its own name.
    translated = translate(
        {
            "model": "m",
            "input": "hi",
            "tools": [
                {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "go"}]}
            ],
        }
    )
    events = run(translated, [message_start(), *tool_block(0, "ns__go", {}, "t1"),
                              *message_end("tool_use")])  # fmt: skip
    item = next(e["item"] for e in events if e["type"] == "response.output_item.done")
    assert (item["namespace"], item["name"], item["arguments"]) == ("ns", "go", "{}")
