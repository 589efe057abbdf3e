"""External CLI agents end to end (docs/API.md): the real Claude Code, Pi and OpenCode, installed
from npm, in their tmux sessions inside the bubblewrap sandbox, against the test model
server, through the live server's API and SSE stream."""

from __future__ import annotations

import contextlib
import http.client
import secrets
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from testkit.api_client import Api, read_until
from testkit.live import free_port
from testkit.model_server import (
    PING,
    Stream,
    echo_fallback,
    message_end,
    message_start,
    text_block,
    text_reply,
    tool_reply,
)
from tests.cli_agents import (  # noqa: F401 - panes_on_failure: an autouse fixture
    approve_then_deny,
    cli_live_server,
    panes_on_failure,
)
from tests.web.test_revocation_live import sign_in

pytestmark = pytest.mark.slow

TOOL_NAMES = {"claude-code": "Bash", "pi": "bash", "opencode": "bash"}


@pytest.fixture(scope="module")
def live(tmp_path_factory, model):
    with cli_live_server(tmp_path_factory.mktemp("cli"), model.url, "the-deployments-real-key",
                         HARNESS_RUNS_PER_MINUTE="100") as server:  # fmt: skip
        yield server


@pytest.fixture(scope="module")
def alice(live):
    return Api(live.url, live.manage("create_api_token", "alice").strip())


def script(model, *replies):
    """The main loop's calls (the ones with tools) get ``replies`` in order; a CLI's side
    calls (titles, summaries) get an echo."""
    queue = list(replies)
    model.reset()
    model.fallback = lambda body: (
        queue.pop(0) if body and body.get("tools") and queue else echo_fallback(body)
    )


def prompt_and_read(api: Api, conversation_id: str, content: str, since: int = 0):
    response, stream = api.events(conversation_id, since=since, timeout=90)
    assert response.status == 200
    status, body = api.call("POST", f"/api/conversations/{conversation_id}/prompt",
                            {"content": content})  # fmt: skip
    assert status == 202, body
    # Only what is newer than ``since``: after a branch switch the feed first replays the
    # active path from where the branches part, its old final status included.
    items = read_until(stream, lambda i: i[0] == "event" and i[2]["type"] == "status"
                       and i[2]["state"] in ("idle", "error") and i[2]["seq"] > since,
                       timeout=90)  # fmt: skip
    return [i[2] for i in items if i[0] == "event" and i[2]["seq"] > since]


def tmux_sessions(live) -> list[str]:
    out = subprocess.run(["tmux", "-S", live.socket, "list-sessions", "-F", "#{session_name}"],
                         capture_output=True, text=True)  # fmt: skip
    return out.stdout.split()


def test_agents_lists_the_installed_clis_and_refuses_unavailable_ones(alice):
    status, body = alice.call("GET", "/api/agents")
    assert status == 200
    agents = {a["name"]: a for a in body["agents"]}
    assert agents["claude-code"]["available"] and agents["claude-code"]["version"] == "2.1.197"
    assert agents["pi"]["available"] and agents["pi"]["version"] == "0.73.1"
    assert agents["opencode"]["available"] and agents["opencode"]["version"] == "1.18.33"
    assert agents["codex"]["available"] and agents["codex"]["version"] == "0.171.0"
    status, body = alice.call("POST", "/api/conversations", {"agent": "no-such-agent"})
    assert (status, body["error"]) == (400, "agent_unavailable")
    assert alice.call("POST", "/api/conversations", {"agent": 5})[0] == 400


@pytest.mark.parametrize("agent", ["claude-code", "pi", "opencode"])
def test_a_prompt_runs_the_cli_in_its_tmux_session_and_the_next_reuses_it(live, alice, model,
                                                                           agent):  # fmt: skip
    status, body = alice.call("POST", "/api/conversations", {"agent": agent})
    assert status == 201
    conversation_id = body["id"]
    assert alice.call("GET", f"/api/conversations/{conversation_id}")[1]["agent"] == agent
    script(model, tool_reply((TOOL_NAMES[agent], {"command": "echo made-by-cli > cli.txt; "
                                                  "cat cli.txt"}), text="Running it."),
           text_reply("Done: **made** it."))  # fmt: skip
    events = prompt_and_read(alice, conversation_id, "make\na file")
    kinds = [e["type"] for e in events]
    assert kinds[0] == "user" and events[0]["content"] == "make\na file"
    call = next(e for e in events if e["type"] == "tool_call")
    result = next(e for e in events if e["type"] == "tool_result")
    assert call["name"] == TOOL_NAMES[agent] and result["id"] == call["id"]
    assert result["result"].strip() == "made-by-cli" and not result["isError"]
    assert [e["content"] for e in events if e["type"] == "text"] == [
        "Running it.",
        "Done: **made** it.",
    ]
    assert "usage" in kinds and events[-1] == {**events[-1], "type": "status", "state": "idle"}
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    name = f"ah-{conversation_id}"
    assert name in tmux_sessions(live)
    # The model saw the prompt through the deployment's gateway: with the deployment's key,
    # which the CLI never had (its own credential stayed at the gateway).
    requests = [r for r in model.requests if (r["body"] or {}).get("tools")]
    assert {r["body"]["model"] for r in requests} == {"claude-haiku-4-5"}  # the conversation's
    keys = {({k.lower(): v for k, v in r["headers"].items()}).get("x-api-key")
            for r in model.requests}  # fmt: skip
    assert requests and keys == {"the-deployments-real-key"}
    assert "hgw-" not in str([r["headers"] for r in model.requests])
    # Each call metered once, by the gateway (the CLI's own report of it is not stored).
    answered = [r for r in model.requests if r["path"].split("?")[0] == "/v1/messages"]
    assert len([e for e in events if e["type"] == "usage"]) == len(answered)

    pid = _pane_pid(live, name)
    assert pid.isdigit()
    _assert_key_never_reaches_the_cli(live, pid)
    script(model, text_reply("Second answer."))
    second = prompt_and_read(alice, conversation_id, "again", since=events[-1]["seq"])
    assert [e["content"] for e in second if e["type"] == "text"] == ["Second answer."]
    assert second[-1]["state"] == "idle" and second[0]["seq"] == events[-1]["seq"] + 1
    assert _pane_pid(live, name) == pid  # the same CLI process: the session was reused
    last = [r for r in model.requests if (r["body"] or {}).get("tools")][-1]["body"]
    assert "Done: **made** it." in str(last["messages"])  # it continued the conversation


def _descendants(pid: int) -> list[int]:
    children = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


def _assert_key_never_reaches_the_cli(live, pane_pid: str) -> None:
    """The deployment's API key is in no environment of the CLI's processes, nor in any
    file of its HOME or the workspace (the CLI never sees it)."""
    # A root server's broker starts the CLI's sandbox (as the user's uid) for the pane.
    processes = _descendants(int(pane_pid)) + _owned_by(_sandbox_uid(live))
    assert len(processes) >= 3  # bwrap, the shell's pipe, the CLI
    for pid in processes:
        with contextlib.suppress(OSError):
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            assert b"the-deployments-real-key" not in environ
            key = b"ANTHROPIC_API_KEY="
            assert key not in environ or key + b"harness-sandbox" in environ  # no secret
    for folder in (live.root / "cli" / "homes", live.root / "workspaces"):
        for path in folder.rglob("*"):
            if path.is_file():
                assert b"the-deployments-real-key" not in path.read_bytes(), path


def _sandbox_uid(live) -> int:
    code = "from agent.models import User; print(User.objects.get(username='alice').pk)"
    return 200_000 + int(live.manage("shell", "-c", code).split()[-1])


def _owned_by(uid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                found.append(int(entry.name))
    return found


def _wait_for(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def long_sleep() -> str:
    """A shell command that runs a minute, unlike any other test's: _sandboxed looks at
    every process of the machine, where a test on another worker may sleep a minute too
    (waiting for its process to end would wait for the other's)."""
    return f"sleep {60 + secrets.randbelow(1000) / 1000:.3f}"


def _sandboxed(command: str) -> bool:
    """Whether a process runs ``command`` (the sandboxed CLI's shell command)."""
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if (
                entry.name.isdigit()
                and (entry / "cmdline").read_bytes().replace(b"\0", b" ").strip()
                == command.encode()
            ):
                return True
    return False


def _pane_pid(live, name: str) -> str:
    out = subprocess.run(["tmux", "-S", live.socket, "display-message", "-p", "-t", f"={name}:",
                          "#{pane_pid}"], capture_output=True, text=True)  # fmt: skip
    return out.stdout.strip()


@pytest.mark.parametrize("agent", ["claude-code", "opencode"])
def test_cancel_interrupts_the_cli_and_the_next_prompt_goes_to_the_same_session(
    live, alice, model, agent
):
    conversation_id = alice.call("POST", "/api/conversations", {"agent": agent})[1]["id"]
    sleep = long_sleep()
    script(model, tool_reply((TOOL_NAMES[agent], {"command": sleep})), text_reply("stopped"))
    response, stream = alice.events(conversation_id, timeout=90)
    alice.call("POST", f"/api/conversations/{conversation_id}/prompt", {"content": "wait"})
    if agent == "opencode":  # it reports a tool call only once the tool has finished
        _wait_for(lambda: any((r["body"] or {}).get("tools") for r in model.requests))
        _wait_for(lambda: _sandboxed(sleep))
    else:
        read_until(stream, lambda i: i[0] == "event" and i[2]["type"] == "tool_call", timeout=90)
    for mode in (None, "follow_up", "steer"):  # one prompt at a time, said plainly
        body = {"content": "more", **({"mode": mode} if mode else {})}
        status, answer = alice.call("POST", f"/api/conversations/{conversation_id}/prompt", body)
        assert (status, answer["error"]) == (409, "prompt_running")
    assert "one prompt at a time" in answer["message"]
    started = time.monotonic()
    assert alice.call("POST", f"/api/conversations/{conversation_id}/cancel")[1] == {
        "cancelled": True}  # fmt: skip
    items = read_until(stream, lambda i: i[0] == "event" and i[2]["type"] == "status"
                       and i[2]["state"] in ("idle", "error"), timeout=30)  # fmt: skip
    assert items[-1][2] == {**items[-1][2], "state": "error", "message": "Cancelled"}
    assert time.monotonic() - started < 20  # not the 60 s of the command
    if agent == "opencode":  # the command it started ended with it
        _wait_for(lambda: not _sandboxed(sleep))
    script(model, text_reply("Back again."))
    since = items[-1][2]["seq"]
    events = prompt_and_read(alice, conversation_id, "hello again", since=since)
    assert [e["content"] for e in events if e["type"] == "text"] == ["Back again."]
    assert events[-1]["state"] == "idle"
    assert f"ah-{conversation_id}" in tmux_sessions(live)


def test_a_cli_runs_usage_counts_against_the_owners_budget(live, alice, model):
    """The gateway meters the CLI's model calls from the upstream's figures into the
    conversation's totals and the owner's monthly spend, so a spent budget refuses the
    next prompt."""
    live.manage("shell", "-c", "from agent.models import User; "
                "User.objects.create_user('carol', password='pw-carol-1234', "
                "monthly_budget_usd='0.01')")  # fmt: skip
    carol = Api(live.url, live.manage("create_api_token", "carol").strip())
    conversation_id = carol.call("POST", "/api/conversations", {"agent": "claude-code"})[1]["id"]
    costly = Stream([message_start(input_tokens=200_000), PING,
                     *text_block(0, "An expensive answer."),
                     *message_end(output_tokens=200_000)])  # fmt: skip
    script(model, costly)
    events = prompt_and_read(carol, conversation_id, "spend")
    usage = [e for e in events if e["type"] == "usage"]
    assert events[-1]["state"] == "idle" and usage
    assert max(u["cost_usd"] for u in usage) > 0.01
    status, body = carol.call("POST", f"/api/conversations/{conversation_id}/prompt",
                              {"content": "more"})  # fmt: skip
    assert (status, body["error"]) == (429, "budget_exceeded")


def test_in_ask_mode_the_clis_permission_request_is_an_approval_card_and_the_answer_goes_back(
    alice, model
):
    conversation_id = alice.call("POST", "/api/conversations", {"agent": "claude-code"})[1]["id"]
    assert (
        alice.call("PATCH", f"/api/conversations/{conversation_id}", {"approval": "ask"})[0] == 200
    )
    script(model, tool_reply(("Bash", {"command": "echo approved > ok.txt; cat ok.txt"})),
           tool_reply(("Bash", {"command": "echo denied > no.txt"})),
           text_reply("Finished."))  # fmt: skip
    approve_then_deny(alice, conversation_id, "Bash", "not that")


def test_a_server_the_cli_leaves_running_is_previewed(live, alice, model):
    """Claude Code's own background shell keeps a server running in the CLI's sandbox: the
    ports API lists it and the preview serves it (the forwarder beside the CLI)."""
    _, conversation = alice.call("POST", "/api/conversations", {"agent": "claude-code"})
    port = free_port()
    serve = {"command": f"python3 -m http.server {port} --bind 127.0.0.1",
             "run_in_background": True, "description": "serve"}  # fmt: skip
    script(model, tool_reply(("Bash", serve), text="Serving."), text_reply("It runs."))
    events = prompt_and_read(alice, conversation["id"], "serve the workspace")
    assert events[-1]["state"] == "idle", events
    deadline = time.monotonic() + 30
    while True:
        _, body = alice.call("GET", f"/api/conversations/{conversation['id']}/ports")
        if port in [p["port"] for p in body["ports"]]:
            break
        assert time.monotonic() < deadline, body
        time.sleep(0.2)
    session = sign_in(live, "alice", "pw-alice-1234")
    connection = http.client.HTTPConnection(urlsplit(live.url).netloc, timeout=30)
    connection.request("GET", f"/preview/{conversation['id']}/{port}/",
                       headers={"Cookie": f"sessionid={session}"})  # fmt: skip
    signed = connection.getresponse()
    signed.read()
    assert signed.status == 302
    connection.request("GET", signed.getheader("Location"))
    answer = connection.getresponse()
    assert answer.status == 200 and b"Directory listing" in answer.read()
    connection.close()
