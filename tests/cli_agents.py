"""The real CLI agents for tests: installed once from the npm registry, at the versions
scripts/cli-agents.sh pins, into var/cli-agents (kept between runs; `make cli-agents` runs
the same script)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from testkit.api_client import read_until

REPO = Path(__file__).resolve().parent.parent
PREFIX = REPO / "var" / "cli-agents"
BINARIES = {"claude-code": "claude", "pi": "pi", "opencode": "opencode", "codex": "codex"}


def _missing(reason: str):
    if os.environ.get("HARNESS_REQUIRE_SERVICES") == "1":
        pytest.fail(f"the CLI agents are required (HARNESS_REQUIRE_SERVICES=1): {reason}")
    pytest.skip(f"the CLI agents are unavailable: {reason}")


def install_cli_agents() -> dict[str, str]:
    """{agent name: executable}, installing them first when absent."""
    paths = {name: PREFIX / "node_modules" / ".bin" / binary for name, binary in BINARIES.items()}
    if not all(p.exists() for p in paths.values()):
        # what `make cli-agents` runs: a copy kept under ~/.cache/harness, or npm
        done = subprocess.run(["sh", "scripts/cli-agents.sh"], cwd=REPO,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        if not all(p.exists() for p in paths.values()):
            _missing(f"scripts/cli-agents.sh did not install them: {done.stdout.strip()}"
                     f" {done.stderr.strip()[-300:]}")  # fmt: skip
    return {name: str(path) for name, path in paths.items()}


@contextlib.contextmanager
def cli_live_server(root: Path, model_url: str, api_key: str, **environ: str):
    """A live server with the real CLI agents, the model behind ``model_url`` reached
    through the deployment's gateway with ``api_key``, and "alice" signed up; its tmux
    server ends with it."""
    from testkit.live import LiveServer
    from tests.conftest import require_bwrap

    require_bwrap()
    if shutil.which("tmux") is None:
        _missing("tmux is not installed")
    clis = install_cli_agents()
    commands = {f"HARNESS_AGENT_{name.upper().replace('-', '_')}_COMMAND": path
                for name, path in clis.items()}  # fmt: skip
    server = LiveServer(root, ANTHROPIC_API_KEY=api_key, ANTHROPIC_BASE_URL=model_url,
                        HARNESS_AGENT_STATE=str(root / "cli"), **commands, **environ)  # fmt: skip
    server.start()
    server.create_users("alice")
    server.socket = str(root / "cli" / "tmux.sock")
    try:
        yield server
    finally:
        server.stop()
        subprocess.run(["tmux", "-S", server.socket, "kill-server"], capture_output=True)


@pytest.fixture(autouse=True)
def panes_on_failure(request, live, model):
    """A failed test of a module that imports this prints every CLI pane of its live server
    and the model calls made (a CLI that hung shows where it stopped)."""
    yield
    if "call" not in getattr(request.node, "failed_phases", ()):
        return
    sessions = subprocess.run(["tmux", "-S", live.socket, "list-sessions", "-F",
                               "#{session_name}"], capture_output=True, text=True)  # fmt: skip
    for name in sessions.stdout.split():
        if name.startswith("ah-"):
            capture = ["capture-pane", "-p", "-J", "-S", "-80", "-t", f"={name}:"]
            pane = subprocess.run(["tmux", "-S", live.socket, *capture], capture_output=True,
                                  text=True)  # fmt: skip
            print(f"=== pane of {name}", (pane.stdout or pane.stderr).rstrip(), sep="\n")
    calls = [(r.get("path"), bool((r.get("body") or {}).get("tools"))) for r in model.requests]
    print("=== model calls since the test's script", calls, sep="\n")
    # The sandboxes' processes (their users' ids are high): which one waits, and on what.
    columns = "uid,pid,ppid,stat,wchan:22,etimes,args"
    ps = subprocess.run(["ps", "-ww", "-eo", columns, "--sort=start_time"], capture_output=True,
                        text=True)  # fmt: skip
    lines = ps.stdout.splitlines()
    sandboxed = [line[:300] for line in lines[1:] if int(line.split()[0]) >= 100000]
    print("=== sandbox processes", *lines[:1], *sandboxed, sep="\n")
    # Each sandbox's own loopback: the CLI's connections to its model gateway's forwarder.
    for line in sandboxed:
        if "/harness-llm/forwarder" in line:
            pid = line.split()[1]
            ss = subprocess.run(["nsenter", "-t", pid, "-n", "ss", "-tanpi"],
                                capture_output=True, text=True)  # fmt: skip
            print(f"=== sockets of the sandbox of {pid}", ss.stdout or ss.stderr, sep="\n")
    for line in sandboxed:  # where each thread of a CLI waits (a CLI that hung)
        if "/opt/cli/" in line:
            print(f"=== threads of {line.split()[1]}", *_threads(line.split()[1]), sep="\n")
    for log in live.root.glob("cli/**/pane.log"):  # what each CLI said, as the server reads it
        print(f"=== {log}", log.read_text(errors="replace")[-3000:], sep="\n")
    print("=== server log", live.log.read_text(errors="replace")[-4000:], sep="\n")


def _threads(pid: str) -> list[str]:
    out = []
    for task in sorted(os.listdir(f"/proc/{pid}/task")):
        base = f"/proc/{pid}/task/{task}"
        try:
            fields = [Path(f"{base}/{name}").read_text().strip() for name in ("comm", "wchan")]
            fields.append(Path(f"{base}/syscall").read_text().split()[0])
        except OSError as exc:
            fields = [str(exc)]
        out.append(f"{task} {' '.join(fields)}")
    try:
        out += [f"fd {fd} -> {os.readlink(f'/proc/{pid}/fd/{fd}')}"
                for fd in os.listdir(f"/proc/{pid}/fd")]  # fmt: skip
    except OSError as exc:
        out.append(str(exc))
    return out


def approve_then_deny(api, conversation_id: str, tool: str, denial: str) -> list[dict]:
    """Prompt a conversation in "ask" mode whose model was scripted to run two commands (one
    writing "approved", one "denied") under the CLI's own tool ``tool``: approve the first card,
    deny the second, and return the prompt's events once it ends. ``denial``: what the CLI says
    back to the model for a denied call."""
    path = f"/api/conversations/{conversation_id}"
    response, stream = api.events(conversation_id, timeout=90)
    api.call("POST", f"{path}/prompt", {"content": "two"})
    waiting = read_until(stream, lambda i: i[0] == "event" and i[2]["type"] == "status"
                         and i[2]["state"] == "waiting_input", timeout=90)  # fmt: skip
    card = next(i[2] for i in waiting if i[0] == "event" and i[2]["type"] == "approval")
    call = next(i[2] for i in waiting if i[0] == "event" and i[2]["type"] == "tool_call")
    assert card["id"] == call["id"] and card["name"] == tool
    assert "echo approved" in card["input"]["command"]
    assert api.call("POST", f"{path}/approvals/{card['id']}", {"decision": "approve"})[0] == 200
    assert api.call("POST", f"{path}/approvals/{card['id']}", {"decision": "approve"})[0] == 409
    middle = read_until(stream, lambda i: i[0] == "event" and i[2]["type"] == "approval",
                        timeout=90)  # fmt: skip
    second = middle[-1][2]
    assert "echo denied" in second["input"]["command"]
    denied = f"{path}/approvals/{second['id']}"
    assert api.call("POST", denied, {"decision": "deny", "reason": "not that"})[0] == 200
    rest = read_until(stream, lambda i: i[0] == "event" and i[2]["type"] == "status"
                      and i[2]["state"] in ("idle", "error"), timeout=90)  # fmt: skip
    response.close()
    events = [i[2] for i in waiting + middle + rest if i[0] == "event"]
    results = {e["id"]: e for e in events if e["type"] == "tool_result"}
    assert results[card["id"]]["result"].strip() == "approved"
    assert results[second["id"]]["isError"] and denial in results[second["id"]]["result"]
    decisions = [(e["decision"], e["by"]) for e in events if e["type"] == "approval_decision"]
    assert decisions == [("approve", "alice"), ("deny", "alice")]
    assert events[-1]["state"] == "idle"
    return events
