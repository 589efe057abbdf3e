"""OpenCode's JSON events (``opencode run --format json``) as the core's events.

OpenCode answers one prompt per process, so its pane runs a small loop (``LOOP``, in node,
which OpenCode's npm package needs anyway): it reads the server's JSON lines from stdin,
runs ``opencode run … --session <id> -- <prompt>`` for each, copies the run's JSON lines to
its stdout, learns the session id from them (the next prompt continues that session) and
ends every prompt with one ``harness_end`` line; an ``abort`` line kills the run and every
process it started (OpenCode ignores SIGINT and SIGTERM while a tool runs, and its commands
run in sessions of their own).

OpenCode's lines: ``text`` and ``reasoning`` (a whole part), ``tool_use`` (a finished call,
with its input and output), ``step_finish`` (tokens and cost), ``error``. Hostile input:
anything malformed is skipped, never raised.
"""

from __future__ import annotations

from typing import Any

from agent.core.cli_agents.claude_code import MAX_FIELD, _int, json_object
from agent.core.events import (
    Event,
    ReasoningEvent,
    StatusEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    UsageEvent,
)

END = "harness_end"

LOOP = r"""
"use strict";
const { spawn } = require("child_process");
const readline = require("readline");
const [cli, base, first] = process.argv.slice(1);
let session = first || "";
let child = null;
const waiting = [];
const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");
function run(message) {
  const args = [...JSON.parse(base), ...(session ? ["--session", session] : []), "--", message];
  child = spawn(cli, args, { stdio: ["ignore", "pipe", "inherit"] });
  readline.createInterface({ input: child.stdout }).on("line", (line) => {
    process.stdout.write(line + "\n");
    try {
      const event = JSON.parse(line);
      if (event && typeof event.sessionID === "string") session = event.sessionID;
    } catch (_) {}
  });
  child.on("error", (error) => say({ type: "error", error: { name: "SpawnError",
    data: { message: `cannot start ${cli}: ${error.message}` } } }));
  child.on("close", (code, signal) => {
    child = null;
    say({ type: "harness_end", code, signal, session });
    if (waiting.length) run(waiting.shift());
  });
}
// The run and every process it started (its commands run in sessions of their own, out of
// reach of a process group signal), found by parent links in the sandbox's /proc.
function tree(root) {
  const fs = require("fs");
  const children = new Map();
  for (const name of fs.readdirSync("/proc")) {
    if (!/^[0-9]+$/.test(name)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, "utf8");
      const parent = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (!children.has(parent)) children.set(parent, []);
      children.get(parent).push(Number(name));
    } catch (_) {}
  }
  const found = [];
  const todo = [root];
  while (todo.length) {
    const pid = todo.pop();
    found.push(pid);
    todo.push(...(children.get(pid) || []));
  }
  return found;
}
readline.createInterface({ input: process.stdin }).on("line", (line) => {
  let message;
  try { message = JSON.parse(line); } catch (_) { return; }
  if (message && message.type === "prompt" && typeof message.message === "string") {
    if (child) waiting.push(message.message); else run(message.message);
  } else if (message && message.type === "abort" && child) {
    for (const pid of tree(child.pid)) {
      try { process.kill(pid, "SIGKILL"); } catch (_) {}
    }
  }
});
"""


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
        code = event.get("code")
        if self.failed is None and event.get("signal") is None and code not in (0, None):
            self.failed = f"opencode exited with code {_int(code)}"


def _error_message(error: Any) -> str:
    if not isinstance(error, dict):
        return "opencode failed"
    data = error.get("data") if isinstance(error.get("data"), dict) else {}
    message = data.get("message") or error.get("message") or error.get("name")
    return str(message or "opencode failed")[:500]
