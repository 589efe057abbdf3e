"""The pane's loop for a CLI that answers one prompt per process (OpenCode's ``run``,
Codex's ``exec``), in node, which both npm packages need anyway.

It reads the server's JSON lines from stdin. A ``prompt`` runs the CLI once: the fresh
command line, or, once a session is known, the resume one (``{session}`` in it replaced by
the session's id), then ``--`` and the prompt; the run's stdout lines are copied to the
loop's stdout, the session id learned from them (the field ``session_key`` of any line),
and every prompt ends with one ``harness_end`` line (exit code, signal, session). A prompt
arriving while one runs waits its turn. An ``abort`` kills the run and every process it
started (a CLI may ignore SIGINT while a tool runs, and its commands may run in sessions of
their own, out of reach of a process group signal). A CLI that cannot start is one
``harness_error`` line.
"""

from __future__ import annotations

import json

END = "harness_end"
ERROR = "harness_error"

LOOP = r"""
"use strict";
const { spawn } = require("child_process");
const readline = require("readline");
const [cli, plan, first] = process.argv.slice(1);
const { fresh, resume, session_key } = JSON.parse(plan);
let session = first || "";
let child = null;
const waiting = [];
const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");
function run(message) {
  const base = session ? resume.map((a) => (a === "{session}" ? session : a)) : fresh;
  child = spawn(cli, [...base, "--", message], { stdio: ["ignore", "pipe", "inherit"] });
  readline.createInterface({ input: child.stdout }).on("line", (line) => {
    process.stdout.write(line + "\n");
    try {
      const event = JSON.parse(line);
      if (event && typeof event[session_key] === "string") session = event[session_key];
    } catch (_) {}
  });
  child.on("error", (error) => say({ type: "harness_error",
    message: `cannot start ${cli}: ${error.message}` }));
  child.on("close", (code, signal) => {
    child = null;
    say({ type: "harness_end", code, signal, session });
    if (waiting.length) run(waiting.shift());
  });
}
// The run and every process it started, found by parent links in the sandbox's /proc.
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


def loop_argv(executable: str, fresh: list[str], resume: list[str], session_key: str,
              session: str | None) -> list[str]:  # fmt: skip
    """The pane's command: the loop running ``executable``; ``session``: the CLI's session
    to continue from the first prompt on (else the first prompt starts one)."""
    plan = json.dumps({"fresh": fresh, "resume": resume, "session_key": session_key})
    return ["node", "-e", LOOP, "--", executable, plan, session or ""]


def prompt_line(content: str) -> str:
    return json.dumps({"type": "prompt", "message": content}, ensure_ascii=True) + "\n"


ABORT_LINE = json.dumps({"type": "abort"}) + "\n"


def exit_failure(name: str, event: dict) -> str | None:
    """Why a prompt's run failed, from its ``harness_end`` line: None for a clean exit or
    one we killed (an abort: the cancel says so itself)."""
    code = event.get("code")
    if event.get("signal") is None and isinstance(code, int) and code != 0:
        return f"{name} exited with code {code}"
    return None
