"""OpenCode's JSON events (``opencode run --format json``) as the core's events.

OpenCode answers one prompt per process, so its pane runs the prompt loop
(``prompt_loop.LOOP``): ``opencode run … --session <id> -- <prompt>`` per prompt, the session
id learned from its ``sessionID``, each prompt ended by one ``harness_end`` line; an
``abort`` line kills the run and every process it started (OpenCode ignores SIGINT and
SIGTERM while a tool runs, and its commands run in sessions of their own).

OpenCode's lines: ``text`` and ``reasoning`` (a whole part), ``tool_use`` (a finished call,
with its input and output), ``step_finish`` (tokens and cost), ``error``. Hostile input:
anything malformed is skipped, never raised.
"""

from __future__ import annotations

from typing import Any

from agent.core.cli_agents.claude_code import MAX_FIELD, _int, json_object
from agent.core.cli_agents.prompt_loop import END, ERROR, exit_failure
from agent.core.events import (
    Event,
    ReasoningEvent,
    StatusEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    UsageEvent,
)


class OpenCodeParser:
    def __init__(self) -> None:
        self.finished = False
        self.failed: str | None = None
        self.session_id: str | None = None

    def feed(self, line: str) -> list[Event]:
        event = json_object(line)
        if event is None:
            return []
        if isinstance(event.get("sessionID"), str) and event["sessionID"].startswith("ses_"):
            self.session_id = event["sessionID"][:200]
        kind = event.get("type")
        part = event.get("part") if isinstance(event.get("part"), dict) else {}
        if kind == "text" and isinstance(part.get("text"), str) and part["text"].strip():
            return [TextEvent(content=part["text"][:MAX_FIELD])]
        if kind == "reasoning" and isinstance(part.get("text"), str) and part["text"].strip():
            return [ReasoningEvent(content=part["text"][:MAX_FIELD])]
        if kind == "tool_use":
            return self._tool(part)
        if kind == "step_finish":
            return self._usage(part)
        if kind == "error":
            self.failed = _error_message(event.get("error"))
        elif kind == ERROR:
            self.failed = str(event.get("message") or "opencode could not start")[:500]
        elif kind == END:
            self._end(event)
        return []

    def _tool(self, part: dict) -> list[Event]:
        state = part.get("state") if isinstance(part.get("state"), dict) else {}
        call_id = str(part.get("callID") or part.get("id") or "")[:200]
        arguments = state.get("input")
        failed = state.get("status") == "error"
        output = state.get("error") if failed else state.get("output")
        return [
            ToolCallEvent(id=call_id, name=str(part.get("tool") or "tool")[:200],
                          input=arguments if isinstance(arguments, dict) else {}),
            StatusEvent(state="running_tool"),
            ToolResultEvent(id=call_id, result=(output if isinstance(output, str)
                                                else "")[:MAX_FIELD], isError=failed),
            StatusEvent(state="thinking"),
        ]  # fmt: skip

    def _usage(self, part: dict) -> list[Event]:
        tokens = part.get("tokens") if isinstance(part.get("tokens"), dict) else {}
        cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
        if not (_int(tokens.get("input")) or _int(tokens.get("output"))):
            return []
        cost = part.get("cost")
        return [UsageEvent(
            input_tokens=_int(tokens.get("input")), output_tokens=_int(tokens.get("output")),
            cache_read_input_tokens=_int(cache.get("read")),
            cache_creation_input_tokens=_int(cache.get("write")),
            cost_usd=float(cost) if isinstance(cost, (int, float)) and cost >= 0 else 0.0,
        )]  # fmt: skip

    def _end(self, event: dict) -> None:
        self.finished = True
        if isinstance(event.get("session"), str) and event["session"].startswith("ses_"):
            self.session_id = event["session"][:200]
        if self.failed is None:
            self.failed = exit_failure("opencode", event)


def _error_message(error: Any) -> str:
    if not isinstance(error, dict):
        return "opencode failed"
    data = error.get("data") if isinstance(error.get("data"), dict) else {}
    message = data.get("message") or error.get("message") or error.get("name")
    return str(message or "opencode failed")[:500]
