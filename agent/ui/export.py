"""A conversation as Markdown or JSON, for the admin's export and the owner's, from the page."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from agent.core.events import from_dict
from agent.ui.transcript import build_parts


def _fence(text: str, lang: str = "") -> str:
    ticks = "`" * max(3, _longest_backtick_run(text) + 1)
    return f"{ticks}{lang}\n{text.rstrip(chr(10))}\n{ticks}"


def _longest_backtick_run(text: str) -> int:
    best = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        best = max(best, run)
    return best


def conversation_meta(conversation) -> dict[str, Any]:
    """A conversation's header for either export (any object with the model's fields)."""
    return {
        "id": str(conversation.id),
        "title": conversation.title,
        "owner": conversation.owner.username,
        "model": conversation.model,
        "state": conversation.state,
        "created": conversation.created.isoformat(),
        "updated": conversation.updated.isoformat(),
        "input_tokens": conversation.input_tokens,
        "output_tokens": conversation.output_tokens,
        "cost_usd": str(conversation.cost_usd),
    }


def conversation_json(meta: dict[str, Any], events: list[dict[str, Any]]) -> str:
    return json.dumps({**meta, "events": events}, indent=2, ensure_ascii=False, default=str)


def conversation_markdown(meta: dict[str, Any], events: list[dict[str, Any]]) -> str:
    lines = [f"# {meta.get('title') or 'Conversation'}", ""]
    for key in ("id", "owner", "model", "state", "created", "input_tokens", "output_tokens",
                "cost_usd"):  # fmt: skip
        lines.append(f"- **{key}**: {meta.get(key)}")
    times = {e["seq"]: e.get("timestamp") for e in events}
    for part in build_parts(from_dict(event) for event in events):
        stamp = times.get(part.seq)
        when = (
            datetime.fromtimestamp(stamp / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            if isinstance(stamp, int) else ""
        )  # fmt: skip
        lines.append("")
        if part.kind == "user":
            mode = {"steer": " (steering)", "follow_up": " (follow-up)"}.get(part.mode, "")
            lines += [f"## User{mode} · #{part.seq} · {when}", "", part.content]
        elif part.kind == "text":
            lines += [f"## Assistant · #{part.seq} · {when}", "", part.content]
        elif part.kind == "reasoning":
            lines += [f"### Reasoning · #{part.seq}", "", _fence(part.content)]
        elif part.kind == "error":
            lines += [f"> **{part.code or 'error'}**: {part.content}"]
        elif part.kind == "tool" and part.tool is not None:
            tool = part.tool
            lines += [f"### Tool `{tool.name}` · {tool.status} · #{part.seq}", "",
                      _fence(tool.input_json, "json")]  # fmt: skip
            if tool.error:
                lines += ["", f"Error: {tool.error}"]
            output = tool.head + tool.rest
            if tool.diff:
                output = "\n".join(line for _, line in tool.diff)
            if output:
                lines += ["", _fence(output)]
        elif part.kind == "approval" and part.approval is not None:
            a = part.approval
            if a.decision == "approve":
                outcome = f"approved by {a.by or 'someone'}"
            elif a.decision == "deny":
                outcome = f"denied by {a.by or 'someone'}" + (f": {a.reason}" if a.reason else "")
            else:
                outcome = "not decided (not run)" if a.closed else "waiting for a decision"
            lines += [f"> **Approval** of `{a.name}` {a.target}: {outcome}".rstrip()]
    return "\n".join(lines) + "\n"
