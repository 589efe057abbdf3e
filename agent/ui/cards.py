"""What a tool call's card and an approval's card show, built from their events.

Plain text throughout (templates escape it), except a ``read`` result's highlighted file
text, which the highlighter sanitizes.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from agent.core.events import ApprovalEvent, ToolCallEvent, ToolResultEvent
from agent.ui.highlight import highlighted

RESULT_LINES = 100  # a tool result's lines shown before "more lines"
LONG_RESULT_LINES = 20  # a result longer than this starts collapsed
TARGET_CHARS = 80  # a tool card's header names its target, cut to this
PREVIEW_ADDRESS = re.compile(r"/preview/[0-9a-f-]{36}/[0-9]{1,5}/")


@dataclass
class ApprovalView:
    """A tool call waiting for the user's decision, and what exactly would
    run: the command, the content written, the change an edit makes."""

    id: str
    name: str
    target: str
    preview: str = ""  # bash: the command; write: the content
    diff: list[tuple[str, str]] = field(default_factory=list)  # edit: (css class, line)
    decision: str = ""  # "" while undecided; approve | deny
    by: str = ""
    reason: str = ""
    closed: bool = False  # the run ended without a decision (cancelled, interrupted)

    @property
    def pending(self) -> bool:
        return not self.decision and not self.closed


def approval_view(event: ApprovalEvent) -> ApprovalView:
    params = event.input if isinstance(event.input, dict) else {}
    view = ApprovalView(event.id, event.name, tool_target(event.name, params))
    if event.name == "bash":
        view.preview = str(params.get("command", ""))
    elif event.name == "write":
        view.preview = str(params.get("content", ""))
    elif event.name == "edit":
        display = event.display if isinstance(event.display, dict) else {}
        if isinstance(display.get("diff"), str):  # the file's change, read when it was asked
            lines = display["diff"].splitlines()
        else:  # (the edit will fail: old_str is not in the file once) its text alone
            old, new = str(params.get("old_str", "")), str(params.get("new_str", ""))
            lines = difflib.unified_diff(old.splitlines(), new.splitlines(), view.target,
                                         view.target, lineterm="")  # fmt: skip
        view.diff = [(_diff_class(line), line) for line in lines]
    else:
        view.preview = json.dumps(params, indent=2, ensure_ascii=False)
    return view


@dataclass
class ToolView:
    id: str
    name: str
    input: Any = None  # the call's parameters, as the model sent them
    status: str = "running"  # running | ok | error
    head: str = ""
    rest: str = ""
    more_lines: int = 0
    error: str = ""
    diff: list[tuple[str, str]] = field(default_factory=list)  # (css class, line)
    exit_code: int | None = None
    target: str = ""  # what the call works on, for the collapsed header
    lines: int = 0  # of the result's text (or its diff): a long one starts collapsed
    path: str = ""  # the file a `read` shows: its result is highlighted by this name's type
    # A background command's job number, whether it still ran when the call returned, and
    # the ports it began to listen on meanwhile: (port, its preview address).
    job: int | None = None
    job_running: bool = False
    ports: list[tuple[int, str]] = field(default_factory=list)
    head_html: str = ""  # head / rest highlighted (sanitized), when the file type is known
    rest_html: str = ""

    @property
    def long(self) -> bool:
        return self.lines > LONG_RESULT_LINES

    @property
    def input_json(self) -> str:
        # Made when a card is drawn: a long conversation's page draws only its latest ones.
        return json.dumps(self.input, indent=2, ensure_ascii=False)

    @property
    def input_text(self) -> str:
        """The parameters as the card shows them: one a line, its value as JSON, except a
        string of several lines (a file's content, an edit's texts, a script), shown as
        its lines under its name rather than as one line of ``\\n`` escapes."""
        if not isinstance(self.input, dict) or not self.input:
            return self.input_json
        lines = []
        for name, value in self.input.items():
            text = value.rstrip("\n") if isinstance(value, str) else ""
            if "\n" in text:
                lines.append(f"{name}:")
                lines += [f"  {line}" for line in text.split("\n")]
            else:
                lines.append(f"{name}: {json.dumps(value, ensure_ascii=False)}")
        return "\n".join(lines)


def _clip(text: str, limit: int = TARGET_CHARS) -> str:
    first, *more = text.strip().splitlines() or [""]
    if len(first) > limit or more:
        return first[: limit - 1].rstrip() + "…"
    return first


def _line_range(start: Any, end: Any) -> str:
    start = start if isinstance(start, int) and not isinstance(start, bool) else None
    end = end if isinstance(end, int) and not isinstance(end, bool) else None
    if start is None and end is None:
        return ""
    return f":{start if start is not None else 1}-{end if end is not None else ''}"


def tool_target(name: str, params: Any) -> str:
    """What a call works on, as its card's header names it: ``read src/app.py:10-40``,
    ``bash ls -la``, ``grep pattern path``, ``edit path``. Plain text (templates escape it),
    one line, cut to ``TARGET_CHARS``."""
    if not isinstance(params, dict):
        return ""

    def text(key: str) -> str:
        value = params.get(key)
        return value if isinstance(value, str) else ""

    if name == "bash":
        return _clip(text("command"))
    if name == "background":
        job = params.get("job")
        return _clip(text("action") + (f" {job}" if isinstance(job, int) else ""))
    if name == "read":
        path = text("path")
        return _clip(path + _line_range(params.get("start_line"), params.get("end_line")))
    if name == "grep":
        return _clip(" ".join(part for part in (text("pattern"), text("path")) if part))
    return _clip(text("path"))


HIGHLIGHTED_TOOLS = frozenset({"read"})  # results that are a file's text (bash, grep: plain)


def tool_view(call: ToolCallEvent) -> ToolView:
    path = call.input.get("path") if isinstance(call.input, dict) else None
    return ToolView(
        id=call.id,
        name=call.name,
        input=call.input,
        target=tool_target(call.name, call.input),
        path=path if call.name in HIGHLIGHTED_TOOLS and isinstance(path, str) else "",
    )


def _main_text(payload: Any, raw: str) -> str:
    if not isinstance(payload, dict):
        return raw
    for key in ("content", "entries", "matches", "output", "result"):
        if isinstance(payload.get(key), str):
            return payload[key]
    return raw


def apply_result(view: ToolView, result: ToolResultEvent) -> None:
    raw = str(result.result)
    try:
        payload = json.loads(raw)
    except (TypeError, ValueError):
        payload = None
    view.status = "error" if result.isError else "ok"
    if isinstance(payload, dict) and isinstance(payload.get("error"), str):
        view.error = payload["error"]
        text = payload.get("output") if isinstance(payload.get("output"), str) else ""
    else:
        text = _main_text(payload, raw)
    if isinstance(payload, dict) and isinstance(payload.get("exit_code"), int):
        view.exit_code = payload["exit_code"]
    lines = text.splitlines(keepends=True)
    view.lines = len(lines)
    view.head = "".join(lines[:RESULT_LINES])
    view.rest = "".join(lines[RESULT_LINES:])
    view.more_lines = max(0, len(lines) - RESULT_LINES)
    if view.path and not view.error:  # a file's text: highlighted by its name's type
        view.head_html = highlighted(view.head, view.path) or ""
        if view.head_html and view.rest:
            view.rest_html = highlighted(view.rest, view.path) or ""
    display = result.display or {}
    if display.get("background") and isinstance(payload, dict):
        job = payload.get("job")
        view.job = job if isinstance(job, int) and not isinstance(job, bool) else None
        view.job_running = payload.get("running") is True
        view.ports = [(p["port"], p["preview"]) for p in payload.get("ports") or []
                      if isinstance(p, dict) and _previewed(p)]  # fmt: skip
    if display.get("kind") == "diff" and isinstance(display.get("diff"), str):
        view.diff = [(_diff_class(line), line) for line in display["diff"].splitlines()]
        view.lines = len(view.diff)  # the diff is what the card shows (and copies)


def _previewed(listening: dict) -> bool:
    port, address = listening.get("port"), listening.get("preview")
    return (isinstance(port, int) and not isinstance(port, bool) and 1 <= port <= 65535
            and isinstance(address, str)
            and PREVIEW_ADDRESS.fullmatch(address) is not None
            and address.endswith(f"/{port}/"))  # fmt: skip


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
