"""Codex's JSON events (``codex exec --json``) as the core's events.

With approval ``auto`` Codex answers one prompt per process (``codex exec``, then ``codex
exec resume <thread>``), so its pane runs the prompt loop (``prompt_loop.LOOP``), which
learns the thread's id from ``thread.started`` and ends every prompt with one
``harness_end`` line. With ``ask`` its pane runs the bridge to ``codex app-server``
(``codex_bridge.BRIDGE``), whose JSON-RPC lines (``item/started``, ``item/completed`` with
camel-cased items, ``turn/completed``, and the approval requests, each a card) are read
here too, beside the bridge's own ``thread.started`` and ``harness_end``.

Codex's lines: ``thread.started`` (its thread id), ``turn.started``, ``item.started`` /
``item.updated`` / ``item.completed`` (an ``agent_message``, a ``reasoning``, a
``command_execution`` with its command and output, a ``file_change`` with the paths it
patched, an ``mcp_tool_call``, an ``error`` that is only a warning), ``turn.completed``
(its usage), ``turn.failed`` and ``error`` (the turn failed). Hostile input: anything
malformed is skipped, never raised.
"""

from __future__ import annotations

import json
from typing import Any

from agent.core.cli_agents.claude_code import MAX_FIELD, _int, json_object
from agent.core.cli_agents.prompt_loop import END, ERROR, exit_failure
from agent.core.events import (
    ApprovalEvent,
    Event,
    ReasoningEvent,
    StatusEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    UsageEvent,
)

HOME_CONFIG = ".codex/config.toml"
PROVIDER_ID = "harness"
# Codex has no metadata for the deployment's Claude models: their context window, so that
# it compacts before the upstream refuses a prompt too long.
CONTEXT_WINDOW = 200_000


def config_toml(base_url: str, key_variable: str) -> str:
    """Codex's ``config.toml``: its model provider is the gateway's Responses API (the key
    it presents is the gateway's placeholder, named by ``env_key``), the models' context
    window; nothing of its own from the network (no web search tool, no update check, no
    analytics)."""
    quoted = json.dumps  # a TOML basic string is a JSON string for these values
    return "\n".join([
        f"model_provider = {quoted(PROVIDER_ID)}",
        'web_search = "disabled"',
        f"model_context_window = {CONTEXT_WINDOW}",
        "check_for_update_on_startup = false",
        "",
        "[analytics]",
        "enabled = false",
        "",
        f"[model_providers.{PROVIDER_ID}]",
        'name = "Harness model gateway"',
        f"base_url = {quoted(base_url)}",
        'wire_api = "responses"',
        f"env_key = {quoted(key_variable)}",
        "",
    ])  # fmt: skip


class CodexParser:
    def __init__(self) -> None:
        self.finished = False
        self.failed: str | None = None
        self.session_id: str | None = None
        self._error: str | None = None  # the turn's failure, said before the process ends
        self._started: set[str] = set()  # items whose tool call was shown already
        # Approval requests waiting for the user: item id → (JSON-RPC request id, input).
        self.pending: dict[str, tuple[str, dict]] = {}

    def feed(self, line: str) -> list[Event]:
        event = json_object(line)
        if event is None:
            return []
        if isinstance(event.get("method"), str):
            return self._app_server(event["method"], event)
        kind = event.get("type")
        if kind == "thread.started" and isinstance(event.get("thread_id"), str):
            self.session_id = event["thread_id"][:200]
        elif kind in ("item.started", "item.updated", "item.completed"):
            item = event.get("item")
            if isinstance(item, dict):
                return self._item(item, done=kind == "item.completed")
        elif kind == "turn.completed":
            self._error = None
            return self._usage(event.get("usage"))
        elif kind == "turn.failed":
            error = event.get("error") if isinstance(event.get("error"), dict) else {}
            self._error = str(error.get("message") or "the turn failed")[:500]
        elif kind == "error":
            self._error = str(event.get("message") or "codex failed")[:500]
        elif kind == ERROR:
            self._error = str(event.get("message") or "codex could not start")[:500]
        elif kind == END:
            self.finished = True
            self.failed = self._error or exit_failure("codex", event)
        return []

    def _item(self, item: dict, done: bool) -> list[Event]:
        kind = item.get("type")
        item_id = str(item.get("id") or "")[:200]
        if kind == "agent_message" and done:
            return _text(TextEvent, item.get("text"))
        if kind == "reasoning" and done:
            return _text(ReasoningEvent, item.get("text"))
        call = _call(kind, item)
        if call is None:
            return []  # a warning (``error``), a to-do list, an update of one shown
        events: list[Event] = []
        if item_id not in self._started:
            self._started.add(item_id)
            events += [ToolCallEvent(id=item_id, name=call[0], input=call[1]),
                       StatusEvent(state="running_tool")]  # fmt: skip
        if done:
            result, failed = _result(kind, item)
            events += [ToolResultEvent(id=item_id, result=result[:MAX_FIELD], isError=failed),
                       StatusEvent(state="thinking")]  # fmt: skip
        return events

    def _app_server(self, method: str, message: dict) -> list[Event]:
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        if method in ("item/started", "item/completed") and isinstance(params.get("item"), dict):
            return self._item(_snake_item(params["item"]), done=method == "item/completed")
        if method in APPROVALS and "id" in message:
            return self._ask(method, message["id"], params)
        if method == "turn/completed" and isinstance(params.get("turn"), dict):
            turn = params["turn"]
            error = turn.get("error") if isinstance(turn.get("error"), dict) else {}
            if turn.get("status") == "failed":
                self._error = str(error.get("message") or "the turn failed")[:500]
        elif method == "error" and params.get("willRetry") is not True:
            error = params.get("error") if isinstance(params.get("error"), dict) else {}
            self._error = str(error.get("message") or "codex failed")[:500]
        return []

    def _ask(self, method: str, request_id: Any, params: dict) -> list[Event]:
        """An approval request of the app server: a card keyed by its item (the tool call's
        id, so it sits with its tool card), answered by ``Codex.approval_response``."""
        item_id = str(params.get("itemId") or request_id)[:200]
        if method == APPROVALS[0]:
            name, call_input = "exec_command", {"command": str(params.get("command") or "")}
        else:
            name, call_input = "apply_patch", {"reason": str(params.get("reason") or "")}
        call_input = {key: value[:MAX_FIELD] for key, value in call_input.items()}
        self.pending[item_id] = (str(request_id)[:200], call_input)  # as the bridge keys it
        waiting = StatusEvent(state="waiting_input", message=f"Waiting for approval: {name}")
        return [ApprovalEvent(id=item_id, name=name, input=call_input), waiting]

    def _usage(self, usage: Any) -> list[Event]:
        if not isinstance(usage, dict) or not (_int(usage.get("input_tokens"))
                                               or _int(usage.get("output_tokens"))):  # fmt: skip
            return []
        cached = _int(usage.get("cached_input_tokens"))
        return [UsageEvent(
            input_tokens=max(0, _int(usage.get("input_tokens")) - cached),
            output_tokens=_int(usage.get("output_tokens")), cache_read_input_tokens=cached,
        )]  # fmt: skip


APPROVALS = ("item/commandExecution/requestApproval", "item/fileChange/requestApproval")
# The app server's item types and fields, as ``codex exec --json`` names them.
ITEM_TYPES = {"agentMessage": "agent_message", "commandExecution": "command_execution",
              "fileChange": "file_change", "mcpToolCall": "mcp_tool_call",
              "webSearch": "web_search", "reasoning": "reasoning"}  # fmt: skip
ITEM_FIELDS = {"aggregatedOutput": "aggregated_output", "exitCode": "exit_code"}


def _snake_item(item: dict) -> dict:
    """An app server's item in ``exec --json``'s shape (types, fields, reasoning's text)."""
    out = {ITEM_FIELDS.get(key, key): value for key, value in item.items()}
    out["type"] = ITEM_TYPES.get(item.get("type"), "other")
    if out["type"] == "reasoning":
        parts = [p for key in ("summary", "content") if isinstance(item.get(key), list)
                 for p in item[key] if isinstance(p, str)]  # fmt: skip
        out["text"] = "\n".join(parts)
    if isinstance(out.get("changes"), list):  # a change's kind is an object there
        out["changes"] = [{**c, "kind": c["kind"].get("type", "") if isinstance(
            c.get("kind"), dict) else c.get("kind", "")} for c in out["changes"]
            if isinstance(c, dict)]  # fmt: skip
    if out.get("status") == "inProgress":
        out["status"] = "in_progress"
    return out


def _text(kind, text: Any) -> list[Event]:
    if isinstance(text, str) and text.strip():
        return [kind(content=text[:MAX_FIELD])]
    return []


def _call(kind: Any, item: dict) -> tuple[str, dict] | None:
    """The tool call an item is (its name and input), or None when it is none."""
    if kind == "command_execution":
        return "exec_command", {"command": str(item.get("command") or "")[:MAX_FIELD]}
    if kind == "file_change":
        changes = item.get("changes") if isinstance(item.get("changes"), list) else []
        return "apply_patch", {"changes": [
            {"path": str(c.get("path", ""))[:4096], "kind": str(c.get("kind", ""))[:40]}
            for c in changes[:1000] if isinstance(c, dict)]}  # fmt: skip
    if kind == "mcp_tool_call":
        arguments = item.get("arguments")
        name = f"{str(item.get('server') or 'mcp')[:100]}.{str(item.get('tool') or 'tool')[:100]}"
        return name, arguments if isinstance(arguments, dict) else {}
    if kind == "web_search":
        return "web_search", {"query": str(item.get("query") or "")[:4096]}
    return None


def _result(kind: Any, item: dict) -> tuple[str, bool]:
    failed = item.get("status") in ("failed", "declined")
    if item.get("status") == "declined":
        return "The user declined this call.", True
    if kind == "command_execution":
        code = item.get("exit_code")
        output = item.get("aggregated_output")
        return (output if isinstance(output, str) else ""), failed or (
            isinstance(code, int) and code != 0)  # fmt: skip
    if kind == "file_change":
        changes = item.get("changes") if isinstance(item.get("changes"), list) else []
        lines = [f"{c.get('kind', '')} {c.get('path', '')}" for c in changes[:1000]
                 if isinstance(c, dict)]  # fmt: skip
        return "\n".join(lines), failed
    if kind == "mcp_tool_call":
        error = item.get("error")
        if isinstance(error, dict):
            return str(error.get("message") or "failed"), True
        return json.dumps(item.get("result"))[:MAX_FIELD], failed
    return "", failed
