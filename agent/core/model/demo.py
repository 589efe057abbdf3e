"""The offline demo model: used when no ANTHROPIC_API_KEY is set.

It answers through the very same loop as Claude, behind the same ``Provider`` seam: it
writes the Messages API's stream events, with live text deltas, markdown and real
tool calls into the workspace, so the whole product can be tried and tested without a key.
Every answer says it is the offline demo. It understands a few requests:
"list files", "read PATH", "grep PATTERN", "write PATH", "run COMMAND", "think …".
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import shlex
from collections.abc import AsyncIterator
from typing import Any

from agent.core.config import DEMO_MODEL
from agent.core.model.provider import Completion, Request
from agent.core.model.stream import StreamEvent, Usage, parse

_ids = itertools.count(1)

BANNER = "*Offline demo model: no `ANTHROPIC_API_KEY` is set, so answers are scripted.*"

HELP = """{banner}

I can still show you how Harness works. Try one of these:

| Prompt | What happens |
|---|---|
{rows}

Markdown renders on the server: **bold**, *italic*, `inline code`, [links](https://example.com),
and code blocks:

```python
def greet(name: str) -> str:
    return f"Hello, {{name}}!"
```

Set `ANTHROPIC_API_KEY` to talk to Claude."""

# The help's table: (tool, prompt, what happens); a row only when its tool is offered (no
# `run` without a bash sandbox to run it in).
HELP_ROWS = (
    ("list_dir", "list files", "a `list_dir` tool call on the workspace"),
    ("read", "read README.md", "a `read` tool call"),
    ("grep", "grep TODO", "a recursive `grep`"),
    ("write", "write hello.py", "a `write` tool call that creates a small script"),
    ("edit", "edit hello.py", "an `edit` tool call with a diff"),
    ("bash", "run ls -la", "a `bash` tool call in the sandbox"),
    (
        "background",
        "serve python3 -m http.server 8000",
        "a server started in the background, shown in the Preview panel",
    ),
)


def help_text(tools: set[str]) -> str:
    rows = "\n".join(
        f"| `{prompt}` | {what} |" for tool, prompt, what in HELP_ROWS if tool in tools
    )
    return HELP.format(banner=BANNER, rows=rows)


HELLO_PY = (
    'def main() -> None:\n    print("Hello from Harness")\n\n\n'
    'if __name__ == "__main__":\n    main()\n'
)


def _last_user(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(text of the last user turn, its tool_result blocks)."""
    if not messages:
        return "", []
    content = messages[-1].get("content")
    if isinstance(content, str):
        return content, []
    texts = [b.get("text", "") for b in content if b.get("type") == "text"]
    results = [b for b in content if b.get("type") == "tool_result"]
    return "\n".join(texts), results


def _tool_names(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    uses = {}
    for message in messages:
        if message["role"] == "assistant" and isinstance(message["content"], list):
            for block in message["content"]:
                if block.get("type") == "tool_use":
                    uses[block["id"]] = block
    return uses


def plan(prompt: str, tools: set[str]) -> tuple[str, tuple[str, dict[str, Any]] | None]:
    """What to say and which tool to call for a fresh prompt."""
    text = prompt.strip()
    lowered = text.lower()
    words = text.split(maxsplit=1)
    verb = words[0].lower() if words else ""
    arg = words[1].strip() if len(words) > 1 else ""
    if verb in ("run", "bash", "$") and arg and "bash" in tools:
        return f"{BANNER}\n\nRunning `{arg}` in the workspace:", ("bash", {"command": arg})
    if verb == "serve" and arg and "background" in tools:
        call = {"command": arg, "background": True}
        return f"{BANNER}\n\nStarting `{arg}` in the background:", ("bash", call)
    if verb == "read" and arg and "read" in tools:
        return f"{BANNER}\n\nReading `{arg}`:", ("read", {"path": _first_token(arg)})
    if verb in ("grep", "search", "find") and arg and "grep" in tools:
        call = {"pattern": arg, "path": ".", "recursive": True}
        return f"{BANNER}\n\nSearching the workspace for `{arg}`:", ("grep", call)
    if verb in ("write", "create") and arg and "write" in tools:
        path = _first_token(arg)
        return f"{BANNER}\n\nCreating `{path}`:", ("write", {"path": path, "content": HELLO_PY})
    if verb == "edit" and arg and "edit" in tools:
        call = {"path": _first_token(arg), "old_str": "Hello from Harness",
                "new_str": "Hello again from Harness"}  # fmt: skip
        return f"{BANNER}\n\nEditing `{call['path']}`:", ("edit", call)
    if re.search(r"\b(list|ls|files|directory)\b", lowered) and "list_dir" in tools:
        return f"{BANNER}\n\nLet me list the workspace.", ("list_dir", {"path": "."})
    return help_text(tools), None


def _first_token(arg: str) -> str:
    try:
        return shlex.split(arg)[0]
    except (ValueError, IndexError):
        return arg.split()[0]


def summarize(results: list[dict[str, Any]], uses: dict[str, dict[str, Any]]) -> str:
    parts = []
    for result in results:
        use = uses.get(result.get("tool_use_id"), {})
        name = use.get("name", "tool")
        try:
            payload = json.loads(result.get("content") or "{}")
        except (TypeError, json.JSONDecodeError):
            payload = {"content": result.get("content")}
        if result.get("is_error") or "error" in payload:
            said = f"`{name}` reported an error: **{payload.get('error', 'unknown')}**"
            # (the why is often the output's last line: "Address already in use")
            last = _last_line(payload.get("output"))
            parts.append(said + (f"; its output ends with `{last}`" if last else ""))
            continue
        body = next((payload[k] for k in ("content", "entries", "matches", "output")
                     if isinstance(payload.get(k), str)), payload.get("result", ""))  # fmt: skip
        if name in ("write", "edit"):
            parts.append(f"Done: {body}.")
        elif payload.get("ports"):
            # (as code: the page links no relative address in model text; the card does)
            served = ", ".join(f"port {p['port']} (`{p['preview']}`)"
                               for p in payload["ports"])  # fmt: skip
            parts.append(f"It runs in the background (job {payload.get('job')}), listening "
                         f"on {served}: “show in the Preview panel” above shows it.")  # fmt: skip
        elif payload.get("running") and isinstance(payload.get("job"), int):
            parts.append(f"It runs in the background (job {payload['job']}) but listens on no "
                         "port yet: the Preview panel's “Find ports” looks again.")  # fmt: skip
        elif not body.strip():
            parts.append(f"`{name}` found nothing.")
        else:
            lines = body.splitlines()
            shown = "\n".join(lines[:40]) + ("\n…" if len(lines) > 40 else "")
            count = f"{len(lines)} line" + ("" if len(lines) == 1 else "s")
            parts.append(f"Here is what `{name}` returned ({count}):\n\n{fenced(shown)}")
    return "\n\n".join(parts) or "Nothing to report."


def _last_line(output: Any) -> str:
    """The last line of a command's output that says something, cut short; "" if none."""
    lines = [line.strip() for line in output.splitlines()] if isinstance(output, str) else []
    last = next((line for line in reversed(lines) if line), "")
    return last[:120].replace("`", "'")


def fenced(body: str) -> str:
    """A code block that the body's own backticks cannot close early."""
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{body}\n{fence}"


def _summary(messages: list[dict[str, Any]]) -> str:
    """The demo's summary of a conversation: its prompts, as a list."""
    prompts = [
        block["text"] for m in messages if m["role"] == "user" and isinstance(m["content"], list)
        for block in m["content"] if block.get("type") == "text"
    ][:-1]  # the last is the instruction to summarise  # fmt: skip
    lines = "\n".join(f"- {p[:200]}" for p in prompts) or "- (no prompts)"
    return f"The user asked (offline demo summary):\n{lines}"


class DemoProvider:
    """The offline demo as a ``Provider``: it writes the Messages API's stream events, which
    are read as the real API's are (``stream.parse``)."""

    def __init__(self, delay: float = 0.02):
        self.delay = delay

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        params = {**request.to_api(), "stream": True}
        messages = request.messages
        tools = {t["name"] for t in request.tools}
        prompt, results = _last_user(messages)
        if prompt.strip():
            # The user's words answer first: after Stop or a steer, the cut-short calls'
            # results share the message with the new prompt, which is what was asked.
            text, call = plan(prompt, tools)
        else:
            text, call = summarize(results, _tool_names(messages)), None
        input_tokens = len(json.dumps(params, default=str)) // 4
        async for raw in self._stream(text, call, input_tokens):
            event = parse(raw)
            if event is not None:
                yield event

    async def complete(self, request: Request) -> Completion:
        """A compaction's summary: the conversation's prompts, as a list."""
        input_tokens = len(json.dumps(request.to_api(), default=str)) // 4
        text = _summary(request.messages)
        return Completion(text, Usage(input_tokens=input_tokens, output_tokens=len(text) // 4),
                          DEMO_MODEL)  # fmt: skip

    async def close(self) -> None:
        pass

    async def _stream(
        self, text: str, call: tuple[str, dict[str, Any]] | None, input_tokens: int
    ) -> AsyncIterator[dict[str, Any]]:
        yield {"type": "message_start", "message": {
            "id": f"msg_demo_{next(_ids)}", "type": "message", "role": "assistant",
            "model": DEMO_MODEL, "content": [],
            "usage": {"input_tokens": input_tokens, "output_tokens": 1},
        }}  # fmt: skip
        yield {"type": "content_block_start", "index": 0,
               "content_block": {"type": "text", "text": ""}}  # fmt: skip
        for piece in re.findall(r"\S+\s*|\s+", text):
            yield {"type": "content_block_delta", "index": 0,
                   "delta": {"type": "text_delta", "text": piece}}  # fmt: skip
            if self.delay:
                await asyncio.sleep(self.delay)
        yield {"type": "content_block_stop", "index": 0}
        if call is not None:
            name, params = call
            yield {"type": "content_block_start", "index": 1, "content_block": {
                "type": "tool_use", "id": f"toolu_demo_{next(_ids)}", "name": name, "input": {},
            }}  # fmt: skip
            yield {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": json.dumps(params)},
            }
            yield {"type": "content_block_stop", "index": 1}
        yield {"type": "message_delta",
               "delta": {"stop_reason": "tool_use" if call else "end_turn"},
               "usage": {"output_tokens": max(1, len(text) // 4)}}  # fmt: skip
        yield {"type": "message_stop"}
