"""A CLI agent's pane as a person reads it: its structured output (one JSON message a
line, which the server parses into events) drawn as text, colours and marks, the way an
interactive CLI would show its work: the answer as it streams, each tool call and the
head of its result, approvals asked for, errors.

The text is the model's and the workspace's, hostile: every control character but a
newline and a tab is dropped, so nothing it says can move the cursor, set a title or
switch the terminal's modes. Lines that are not JSON (the CLI's own notices) are shown
as they are, cleaned the same way.
"""

from __future__ import annotations

import json
import re

from agent.core.cli_agents.providers import PROVIDERS
from agent.core.events import (
    ApprovalEvent,
    ErrorEvent,
    Event,
    ReasoningEvent,
    StatusEvent,
    TextDeltaEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
)

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")
RESULT_LINES = 8
ARGUMENTS = 200
BOLD, DIM, RED, YELLOW, CYAN, GREEN, OFF = ("\x1b[1m", "\x1b[2m", "\x1b[31m", "\x1b[33m",
                                            "\x1b[36m", "\x1b[32m", "\x1b[0m")  # fmt: skip


def clean(text: str) -> str:
    return _CONTROL.sub("", text)


def _arguments(value: dict) -> str:
    if isinstance(value.get("command"), str):
        shown = value["command"]
    elif isinstance(value.get("file_path") or value.get("path"), str):
        shown = value.get("file_path") or value.get("path")
    else:
        shown = json.dumps(value, ensure_ascii=False)
    shown = clean(shown).replace("\n", " ")
    return shown if len(shown) <= ARGUMENTS else shown[:ARGUMENTS] + "…"


class PaneView:
    def __init__(self, provider: str) -> None:
        found = PROVIDERS.get(provider)
        self.parser = found.parser() if found is not None else None
        self.streamed = False  # the answer's text came as deltas: its whole is not repeated

    def line(self, line: str) -> str:
        """What the screen shows for one line of the CLI's output."""
        if self.parser is None or not line.lstrip().startswith("{"):
            return clean(line) + "\n"
        return "".join(self.event(event) for event in self.parser.feed(line))

    def event(self, event: Event) -> str:
        if isinstance(event, TextDeltaEvent):
            self.streamed = True
            return clean(event.content)
        if isinstance(event, TextEvent):
            streamed, self.streamed = self.streamed, False
            return "\n" if streamed else clean(event.content) + "\n"
        if isinstance(event, ReasoningEvent):
            return f"{DIM}{clean(event.content)}{OFF}\n"
        if isinstance(event, ToolCallEvent):
            return f"{BOLD}{CYAN}● {clean(event.name)}{OFF}({_arguments(event.input)})\n"
        if isinstance(event, ToolResultEvent):
            lines = clean(event.result).splitlines() or [""]
            more = len(lines) - RESULT_LINES
            shown = "".join(f"  {DIM}│{OFF} {line}\n" for line in lines[:RESULT_LINES])
            colour = RED if getattr(event, "is_error", False) else DIM
            return shown + (f"  {colour}… {more} more lines{OFF}\n" if more > 0 else "")
        if isinstance(event, ApprovalEvent):
            return f"{YELLOW}? {clean(event.name)} asks to run: {_arguments(event.input)}{OFF}\n"
        if isinstance(event, ErrorEvent):
            return f"{RED}✗ {clean(event.message)}{OFF}\n"
        if isinstance(event, StatusEvent) and event.state == "idle":
            return f"{GREEN}✓ done{OFF}\n"
        return ""
