"""Parts (seed 000's user / text / tool / reasoning, plus error) built from stored events.

The same part objects feed the page and the live WebSocket fragments, so a reload shows
exactly what streamed. Tool output is shown as text (templates escape it); only model text
goes through the markdown seam.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .rendering import render_markdown

# Errors that say nothing about the prompt itself (the API was down, the stream broke, the
# server stopped): offer to send the same prompt again.
NOT_RETRYABLE = {"cancelled", "max_turns", "max_tokens", "refusal", "invalid_tool_input"}
RESULT_LINES = 100  # seed 000: tool results truncated to 100 lines in the UI
STATUS_TEXT = {"thinking": "Thinking...", "running_tool": "Running: {message}...",
               "error": "Error: {message}", "idle": ""}  # fmt: skip


@dataclass
class Part:
    kind: str  # user | text | tool | reasoning | error
    seq: int
    content: str = ""
    html: str = ""  # sanitized markdown (text parts only)
    code: str = ""  # error parts
    retry: str = ""  # error parts: the prompt a Retry button sends again
    tool: ToolView | None = None


@dataclass
class ToolView:
    id: str
    name: str
    input_json: str
    status: str = "running"  # running | ok | error
    head: str = ""
    rest: str = ""
    more_lines: int = 0
    error: str = ""
    diff: list[tuple[str, str]] = field(default_factory=list)  # (css class, line)
    exit_code: int | None = None
    result_seq: int | None = None


def status_text(state: str, message: str | None) -> str:
    return STATUS_TEXT.get(state, "").format(message=message or "")


def tool_view(call: dict[str, Any], result: dict[str, Any] | None = None) -> ToolView:
    view = ToolView(
        id=str(call.get("id", "")),
        name=str(call.get("name", "")),
        input_json=json.dumps(call.get("input", {}), indent=2, ensure_ascii=False),
    )
    if result is not None:
        apply_result(view, result)
    return view


def _main_text(payload: Any, raw: str) -> str:
    if not isinstance(payload, dict):
        return raw
    for key in ("content", "entries", "matches", "output", "result"):
        if isinstance(payload.get(key), str):
            return payload[key]
    return raw


def apply_result(view: ToolView, result: dict[str, Any]) -> None:
    raw = str(result.get("result", ""))
    try:
        payload = json.loads(raw)
    except (TypeError, ValueError):
        payload = None
    view.status = "error" if result.get("isError") else "ok"
    view.result_seq = result.get("seq")
    if isinstance(payload, dict) and isinstance(payload.get("error"), str):
        view.error = payload["error"]
        text = payload.get("output") if isinstance(payload.get("output"), str) else ""
    else:
        text = _main_text(payload, raw)
    if isinstance(payload, dict) and isinstance(payload.get("exit_code"), int):
        view.exit_code = payload["exit_code"]
    lines = text.splitlines(keepends=True)
    view.head = "".join(lines[:RESULT_LINES])
    view.rest = "".join(lines[RESULT_LINES:])
    view.more_lines = max(0, len(lines) - RESULT_LINES)
    display = result.get("display") or {}
    if display.get("kind") == "diff" and isinstance(display.get("diff"), str):
        view.diff = [(_diff_class(line), line) for line in display["diff"].splitlines()]


def _diff_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "diff-file"
    if line.startswith("@@"):
        return "diff-hunk"
    if line.startswith("+"):
        return "diff-add"
    if line.startswith("-"):
        return "diff-del"
    return "diff-ctx"


def part_for(event: dict[str, Any], last_prompt: str = "") -> Part | None:
    """The part a single (non-tool) event shows as, or None. ``last_prompt``: the prompt
    the event's run answered (an error part offers to retry it)."""
    kind, seq = event["type"], event["seq"]
    if kind == "user":
        return Part("user", seq, content=event["content"])
    if kind == "text":
        return Part("text", seq, content=event["content"], html=render_markdown(event["content"]))
    if kind == "reasoning":
        return Part("reasoning", seq, content=event["content"])
    if kind == "error":
        code = event.get("code", "")
        retry = last_prompt if code not in NOT_RETRYABLE else ""
        return Part("error", seq, content=event["message"], code=code, retry=retry)
    return None


def build_parts(events: list[dict[str, Any]]) -> list[Part]:
    parts: list[Part] = []
    tools: dict[str, Part] = {}
    last_prompt = ""
    for event in events:
        if event["type"] == "user":
            last_prompt = event["content"]
        if event["type"] == "tool_call":
            part = Part("tool", event["seq"], tool=tool_view(event))
            tools[str(event["id"])] = part
            parts.append(part)
        elif event["type"] == "tool_result":
            part = tools.get(str(event["id"]))
            if part is not None and part.tool is not None:
                apply_result(part.tool, event)
        else:
            part = part_for(event, last_prompt)
            if part is not None:
                parts.append(part)
    return parts
