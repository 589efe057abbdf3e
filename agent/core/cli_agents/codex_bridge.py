"""The pane's bridge to Codex's ``app-server`` (JSON-RPC over stdio, one JSON message a
line), for a conversation whose approval is ``ask``: ``codex exec`` cannot ask, the app
server can (``item/commandExecution/requestApproval``, ``item/fileChange/requestApproval``).

The bridge (node, like the prompt loop) starts ``codex app-server``, initialises it, and for
our lines on stdin does: ``prompt`` → the thread started (or resumed, from the session id it
was given; a new one when that cannot be resumed) with approval ``untrusted`` (every command
but the known-safe read-only ones asks) in our sandbox only (Codex's own is not used), then
``turn/start``; ``abort`` → ``turn/interrupt``, then the background terminals that the
interrupted turn's commands left are terminated (``thread/backgroundTerminals/*``, of the
app server's experimental API); ``approval`` → the JSON-RPC answer to that request
(``accept`` or ``decline``). Every line of the server goes to stdout unchanged (the parser,
``codex.CodexParser``, reads them), with the bridge's own: ``thread.started`` (the thread's
id, which resumes it later), ``harness_end`` after each turn, ``harness_error``. A request
of the server the bridge does not handle (questions for the user, MCP elicitations, more
permissions) is answered with an error: Codex goes on without it.
"""

from __future__ import annotations

import json

BRIDGE = r"""
"use strict";
const { spawn } = require("child_process");
const readline = require("readline");
const [cli, plan, first] = process.argv.slice(1);
const { model } = JSON.parse(plan);
const ASKS = ["item/commandExecution/requestApproval", "item/fileChange/requestApproval"];
let thread = first || "";
let initialized = false;
let started = false;
let turn = null;
let busy = false;
let nextId = 1;
const items = new Map();  // turn id -> the ids of its items (commands, approvals)
const interrupted = new Set();
const calls = new Map();
const asked = new Map();
const waiting = [];
const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const server = spawn(cli, ["app-server"], { stdio: ["pipe", "pipe", "inherit"] });
server.on("error", (error) => { say({ type: "harness_error",
  message: `cannot start ${cli}: ${error.message}` }); process.exit(1); });
server.on("close", (code) => { say({ type: "harness_end", code: code === null ? 1 : code,
  signal: null, session: thread }); process.exit(code === null ? 1 : code); });
const send = (o) => server.stdin.write(JSON.stringify(o) + "\n");
function call(method, params) {
  return new Promise((resolve, reject) => {
    const id = nextId++;
    calls.set(id, { resolve, reject });
    send({ id, method, params });
  });
}
readline.createInterface({ input: server.stdout }).on("line", (line) => {
  let message;
  try { message = JSON.parse(line); } catch (_) { process.stdout.write(line + "\n"); return; }
  if (!message || typeof message !== "object") return;
  if (message.id !== undefined && message.method === undefined && calls.has(message.id)) {
    const { resolve, reject } = calls.get(message.id);
    calls.delete(message.id);
    if (message.error) reject(new Error(message.error.message || "app-server error"));
    else resolve(message.result || {});
    return;
  }
  process.stdout.write(line + "\n");
  const params = message.params || {};
  if (message.id !== undefined && typeof message.method === "string") {
    if (ASKS.includes(message.method)) {
      asked.set(String(message.id), message.id);
      note(params.turnId, params.itemId);
    } else send({ id: message.id, error: { code: -32601, message: "not available here" } });
    return;
  }
  if (message.method === "turn/started") turn = message.params.turn.id;
  if (message.method === "item/started" && params.item) {
    note(params.turnId, params.item.id);
    // A command that started after its turn was interrupted is stopped too.
    if (interrupted.has(params.turnId) && params.item.processId) {
      terminate(params.item.processId);
    }
  }
  if (message.method === "turn/completed") {
    const done = params.turn && params.turn.id;
    if (interrupted.has(done)) {
      const late = new Promise((resolve) => setTimeout(resolve, 4000));
      Promise.race([stopCommands(done), late]).then(() => finish(0));
    } else {
      items.delete(done);  // only an interrupted turn's items are looked at again
      finish(0);
    }
  }
});
function note(turnId, itemId) {
  if (!turnId || !itemId) return;
  if (!items.has(turnId)) items.set(turnId, new Set());
  items.get(turnId).add(itemId);
}
function terminate(processId) {
  return call("thread/backgroundTerminals/terminate", { threadId: thread, processId })
    .catch(() => {});
}
// An interrupted turn's commands keep running as background terminals when the interrupt
// came as they started (after their approval): the ones its items started are ended.
async function stopCommands(turnId) {
  const mine = items.get(turnId) || new Set();
  const { data } = await call("thread/backgroundTerminals/list", { threadId: thread })
    .catch(() => ({ data: [] }));
  await Promise.all((data || []).filter((t) => mine.has(t.itemId))
    .map((t) => terminate(t.processId)));
  items.delete(turnId);
}
function finish(code) {
  turn = null;
  busy = false;
  say({ type: "harness_end", code, signal: null, session: thread });
  if (waiting.length) run(waiting.shift());
}
async function run(text) {
  busy = true;
  try {
    if (!initialized) {
      // experimentalApi: the background terminals' methods (stopCommands)
      await call("initialize", { clientInfo: { name: "harness", version: "1" },
                                 capabilities: { experimentalApi: true } });
      send({ method: "initialized" });
      initialized = true;
    }
    if (!started) {
      const settings = { approvalPolicy: "untrusted", sandbox: "danger-full-access",
                         cwd: process.cwd(), ...(model ? { model } : {}) };
      // A thread that cannot be resumed (its files gone) is not retried forever: a new one.
      const answer = thread
        ? await call("thread/resume", { threadId: thread, ...settings })
            .catch(() => call("thread/start", settings))
        : await call("thread/start", settings);
      thread = answer.thread.id;
      started = true;
      say({ type: "thread.started", thread_id: thread });
    }
    const answer = await call("turn/start", { threadId: thread,
      input: [{ type: "text", text, text_elements: [] }] });
    turn = turn || answer.turn.id;
  } catch (error) {
    say({ type: "harness_error", message: String(error.message || error) });
    finish(1);
  }
}
readline.createInterface({ input: process.stdin }).on("line", (line) => {
  let message;
  try { message = JSON.parse(line); } catch (_) { return; }
  if (!message) return;
  if (message.type === "prompt" && typeof message.message === "string") {
    if (busy) waiting.push(message.message); else run(message.message);
  } else if (message.type === "abort" && turn) {
    interrupted.add(turn);
    call("turn/interrupt", { threadId: thread, turnId: turn }).catch(() => {});
  } else if (message.type === "approval" && asked.has(message.id)) {
    const id = asked.get(message.id);
    asked.delete(message.id);
    send({ id, result: { decision: message.allow === true ? "accept" : "decline" } });
  }
});
"""


def bridge_argv(executable: str, model: str | None, session: str | None) -> list[str]:
    return ["node", "-e", BRIDGE, "--", executable, json.dumps({"model": model}), session or ""]


def approval_line(request_id: str, allow: bool) -> str:
    return json.dumps({"type": "approval", "id": request_id, "allow": allow}) + "\n"
