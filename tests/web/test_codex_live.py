"""Codex end to end (docs/API.md, "CLI agents"; docs/FEATURES.md): the real Codex CLI from
npm, in its tmux session inside the bubblewrap sandbox, speaking OpenAI's Responses API to
the deployment's gateway, which translates it to the scripted Messages API upstream."""

from __future__ import annotations

import time

import pytest

from testkit.api_client import Api, read_until
from testkit.model_server import text_reply, tool_reply
from tests.cli_agents import (  # noqa: F401 - panes_on_failure: an autouse fixture
    approve_then_deny,
    cli_live_server,
    panes_on_failure,
)
from tests.web.test_cli_agents_live import (
    _assert_key_never_reaches_the_cli,
    _pane_pid,
    _sandboxed,
    _wait_for,
    long_sleep,
    prompt_and_read,
    script,
    tmux_sessions,
)

pytestmark = pytest.mark.slow

KEY = "the-deployments-real-key"


@pytest.fixture(scope="module")
def live(tmp_path_factory, model):
    with cli_live_server(tmp_path_factory.mktemp("codex"), model.url, KEY,
                         HARNESS_RUNS_PER_MINUTE="100") as server:  # fmt: skip
        yield server


@pytest.fixture(scope="module")
def alice(live):
    return Api(live.url, live.manage("create_api_token", "alice").strip())


def responses_calls(model) -> list[dict]:
    """The upstream calls of Codex's turns (the ones offering its tools)."""
    return [r for r in model.requests if (r["body"] or {}).get("tools")]


def test_codex_is_listed_available(alice):
    status, body = alice.call("GET", "/api/agents")
    assert status == 200
    codex = {a["name"]: a for a in body["agents"]}["codex"]
    assert codex["available"] and codex["version"] == "0.171.0"


def test_codex_answers_runs_a_command_in_the_workspace_and_continues_its_session(live, alice,
                                                                                model):  # fmt: skip
    conversation_id = alice.call("POST", "/api/conversations", {"agent": "codex"})[1]["id"]
    script(model, tool_reply(("exec_command", {"cmd": "echo made-by-codex > cx.txt; cat cx.txt"}),
                             text="Running it."),
           text_reply("Done: **made** it."))  # fmt: skip
    events = prompt_and_read(alice, conversation_id, "make\na file")
    assert events[0]["type"] == "user" and events[0]["content"] == "make\na file"
    call = next(e for e in events if e["type"] == "tool_call")
    result = next(e for e in events if e["type"] == "tool_result")
    assert call["name"] == "exec_command" and "made-by-codex" in call["input"]["command"]
    assert result["id"] == call["id"] and "made-by-codex" in result["result"]
    assert not result["isError"]
    texts = [e["content"] for e in events if e["type"] == "text"]
    assert texts == ["Running it.", "Done: **made** it."]
    assert events[-1] == {**events[-1], "type": "status", "state": "idle"}
    # The file is in the conversation's workspace (the Files API reads it).
    status, body = alice.call("GET", "/api/files/cx.txt")
    assert status == 200 and "made-by-codex" in str(body)
    # Through the gateway: the conversation's model, the deployment's key upstream, each
    # call metered once from the upstream's figures (Codex's own report is not stored).
    calls = responses_calls(model)
    assert len(calls) == 2 and {r["body"]["model"] for r in calls} == {"claude-haiku-4-5"}
    keys = {({k.lower(): v for k, v in r["headers"].items()}).get("x-api-key")
            for r in model.requests}  # fmt: skip
    assert keys == {KEY}
    second_call = calls[1]["body"]["messages"]
    assert any(b.get("type") == "tool_result" and "made-by-codex" in str(b.get("content"))
               for m in second_call for b in m["content"] if isinstance(b, dict))  # fmt: skip
    usage = [e for e in events if e["type"] == "usage"]
    assert len(usage) == len(model.requests) and all(u["cost_usd"] > 0 for u in usage)

    name = f"ah-{conversation_id}"
    pid = _pane_pid(live, name)
    _assert_key_never_reaches_the_cli(live, pid)
    script(model, text_reply("Second answer."))
    second = prompt_and_read(alice, conversation_id, "again", since=events[-1]["seq"])
    assert [e["content"] for e in second if e["type"] == "text"] == ["Second answer."]
    assert second[-1]["state"] == "idle"
    assert _pane_pid(live, name) == pid  # the same pane: the session was reused
    last = responses_calls(model)[-1]["body"]
    assert "Done: **made** it." in str(last["messages"])  # it resumed its thread


@pytest.mark.parametrize("approval", ["auto", "ask"])
def test_cancel_stops_codex_and_the_next_prompt_goes_to_the_same_session(live, alice, model,
                                                                         approval):  # fmt: skip
    conversation_id = alice.call("POST", "/api/conversations", {"agent": "codex"})[1]["id"]
    path = f"/api/conversations/{conversation_id}"
    assert alice.call("PATCH", path, {"approval": approval})[0] == 200
    sleep = long_sleep()
    script(model, tool_reply(("exec_command", {"cmd": sleep, "yield_time_ms": 60000})),
           text_reply("stopped"))  # fmt: skip
    response, stream = alice.events(conversation_id, timeout=90)
    alice.call("POST", f"{path}/prompt", {"content": "wait"})
    if approval == "ask":  # its app server asks first
        card = read_until(stream, lambda i: i[0] == "event" and i[2]["type"] == "approval",
                          timeout=90)[-1][2]  # fmt: skip
        assert alice.call("POST", f"{path}/approvals/{card['id']}",
                          {"decision": "approve"})[0] == 200  # fmt: skip
    _wait_for(lambda: _sandboxed(sleep))
    started = time.monotonic()
    assert alice.call("POST", f"{path}/cancel")[1] == {"cancelled": True}
    items = read_until(stream, lambda i: i[0] == "event" and i[2]["type"] == "status"
                       and i[2]["state"] in ("idle", "error"), timeout=30)  # fmt: skip
    assert items[-1][2] == {**items[-1][2], "state": "error", "message": "Cancelled"}
    assert time.monotonic() - started < 20  # not the 60 s of the command
    _wait_for(lambda: not _sandboxed(sleep))
    script(model, text_reply("Back again."))
    events = prompt_and_read(alice, conversation_id, "hello again", since=items[-1][2]["seq"])
    assert [e["content"] for e in events if e["type"] == "text"] == ["Back again."]
    assert events[-1]["state"] == "idle"
    assert f"ah-{conversation_id}" in tmux_sessions(live)


@pytest.mark.parametrize("delay", [0.1, 0.3])
def test_a_command_approved_just_before_a_cancel_does_not_keep_running(live, model, delay):
    """The race: a cancel that reaches Codex as an approved command starts. Codex ends the
    turn as interrupted, but the command lived on as a background terminal, for its whole
    minute (in 3 of 5 runs before the bridge ended the interrupted turn's terminals). Its
    own user: each Codex session is many threads of the user's process limit."""
    name = f"bo{int(delay * 10)}"
    live.create_users(name)
    bo = Api(live.url, live.manage("create_api_token", name).strip())
    conversation_id = bo.call("POST", "/api/conversations", {"agent": "codex"})[1]["id"]
    path = f"/api/conversations/{conversation_id}"
    assert bo.call("PATCH", path, {"approval": "ask"})[0] == 200
    sleep = long_sleep()
    script(model, tool_reply(("exec_command", {"cmd": sleep, "yield_time_ms": 60000})),
           text_reply("stopped"))  # fmt: skip
    response, stream = bo.events(conversation_id, timeout=90)
    bo.call("POST", f"{path}/prompt", {"content": "wait"})
    card = read_until(stream, lambda i: i[0] == "event" and i[2]["type"] == "approval",
                      timeout=90)[-1][2]  # fmt: skip
    assert bo.call("POST", f"{path}/approvals/{card['id']}", {"decision": "approve"})[0] == 200
    time.sleep(delay)  # the command starting, or about to
    assert bo.call("POST", f"{path}/cancel")[1] == {"cancelled": True}
    read_until(stream, lambda i: i[0] == "event" and i[2]["type"] == "status"
               and i[2]["state"] in ("idle", "error"), timeout=30)  # fmt: skip
    _wait_for(lambda: not _sandboxed(sleep), timeout=15)  # not its minute


def test_in_ask_mode_codexs_approval_requests_are_cards_and_the_answers_go_back(alice, model):
    conversation_id = alice.call("POST", "/api/conversations", {"agent": "codex"})[1]["id"]
    path = f"/api/conversations/{conversation_id}"
    assert alice.call("PATCH", path, {"approval": "ask"})[0] == 200
    script(model, tool_reply(("exec_command", {"cmd": "echo approved > ok.txt; cat ok.txt"})),
           tool_reply(("exec_command", {"cmd": "echo denied > no.txt"})),
           text_reply("Finished."))  # fmt: skip
    events = approve_then_deny(alice, conversation_id, "exec_command", "declined")
    assert [e["content"] for e in events if e["type"] == "text"] == ["Finished."]
    status, _ = alice.call("GET", "/api/files/no.txt")
    assert status == 404  # the denied command never ran
