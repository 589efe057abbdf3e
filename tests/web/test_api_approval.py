"""Tool approval over the HTTP + SSE API (docs/API.md), against a live Daphne server, the
real SDK and the test model server."""

from __future__ import annotations

import json
import time

import pytest

from testkit.api_client import Api, read_until
from testkit.live import LiveServer
from testkit.model_server import text_reply, tool_reply
from tests.web.test_api_queue import events_of, finals, is_event, is_final, new_conversation, prompt


@pytest.fixture(scope="module")
def live(tmp_path_factory, model):
    server = LiveServer(tmp_path_factory.mktemp("approval-api"), ANTHROPIC_API_KEY="test-key",
                        ANTHROPIC_BASE_URL=model.url, HARNESS_BASH="unsafe",
                        HARNESS_RUNS_PER_MINUTE="100", HARNESS_CONCURRENT_RUNS="5",
                        HARNESS_RUN_LEASE="3")  # fmt: skip
    server.start()
    server.create_users("ada", "bea")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def ada(live):
    return Api(live.url, live.manage("create_api_token", "ada").strip())


@pytest.fixture(scope="module")
def bea(live):
    return Api(live.url, live.manage("create_api_token", "bea").strip())


@pytest.fixture(scope="module")
def workspace(live):
    code = "from agent.models import User; print(User.objects.get(username='ada').id)"
    user_id = live.manage("shell", "-c", code).strip().splitlines()[-1]
    return live.root / "workspaces" / user_id


def asking(api) -> str:
    conversation = new_conversation(api)
    status, payload = api.call("PATCH", f"/api/conversations/{conversation}", {"approval": "ask"})
    assert status == 200 and payload["approval"] == "ask", payload
    return conversation


def decide(api, conversation, call_id, decision, reason=None):
    body = {"decision": decision} if reason is None else {"decision": decision, "reason": reason}
    return api.call("POST", f"/api/conversations/{conversation}/approvals/{call_id}", body)


def until_waiting(api, conversation, text="go"):
    _, stream = api.events(conversation)
    assert prompt(api, conversation, text) == (202, {"accepted": True})
    seen = read_until(stream, is_event("status", state="waiting_input"))
    (approval,) = [e for e in events_of(seen) if e["type"] == "approval"]
    return stream, seen, approval


def test_patch_approval_takes_the_three_modes_only(ada):
    conversation = new_conversation(ada)
    path = f"/api/conversations/{conversation}"
    assert ada.call("GET", path)[1]["approval"] == "auto"
    for mode in ("ask", "read_only", "auto"):
        assert ada.call("PATCH", path, {"approval": mode})[1]["approval"] == mode
    status, payload = ada.call("PATCH", path, {"approval": "sometimes"})
    assert status == 400 and payload["error"] == "bad_request"


def test_ask_waits_then_an_approved_call_runs(ada, bea, fresh, workspace):
    conversation = asking(ada)
    fresh.enqueue(tool_reply(("write", {"path": "approved.txt", "content": "yes"})),
                  text_reply("written"))  # fmt: skip
    stream, _, approval = until_waiting(ada, conversation)
    assert approval["name"] == "write" and approval["input"]["content"] == "yes"
    assert not (workspace / "approved.txt").exists()
    # Another user: 404; an unknown call: 404; a bad decision: 400.
    assert decide(bea, conversation, approval["id"], "approve")[0] == 404
    status, payload = decide(ada, conversation, "toolu_nope", "approve")
    assert status == 404 and payload["error"] == "not_found"
    assert decide(ada, conversation, approval["id"], "maybe")[0] == 400
    # A replay (a reload, another tab) shows the pending approval too.
    _, replay = ada.events(conversation)
    replayed = events_of(read_until(replay, is_event("approval")))
    assert replayed[-1]["id"] == approval["id"]
    assert decide(ada, conversation, approval["id"], "approve")[0] == 200
    events = events_of(read_until(stream, is_final))
    (decision,) = [e for e in events if e["type"] == "approval_decision"]
    assert (decision["id"], decision["decision"], decision["by"]) == (approval["id"], "approve",
                                                                       "ada")  # fmt: skip
    assert (workspace / "approved.txt").read_text() == "yes"
    assert finals(events)[-1]["state"] == "idle"
    status, payload = decide(ada, conversation, approval["id"], "deny")
    assert status == 409 and payload["error"] == "already_decided"


def test_a_denied_call_gives_the_model_the_reason(ada, fresh, workspace):
    conversation = asking(ada)
    fresh.enqueue(tool_reply(("bash", {"command": "touch denied.txt"})), text_reply("fine"))
    stream, _, approval = until_waiting(ada, conversation)
    assert decide(ada, conversation, approval["id"], "deny", "too risky")[0] == 200
    assert decide(ada, conversation, approval["id"], "approve")[0] == 409
    events = events_of(read_until(stream, is_final))
    (result,) = [e for e in events if e["type"] == "tool_result"]
    assert result["isError"] and "too risky" in json.loads(result["result"])["error"]
    assert not (workspace / "denied.txt").exists()
    assert [e["content"] for e in events if e["type"] == "text"] == ["fine"]
    assert fresh.bodies[-1]["messages"][-1]["content"][0]["is_error"] is True


def test_read_only_offers_no_tool_that_changes_things(ada, fresh):
    conversation = new_conversation(ada)
    ada.call("PATCH", f"/api/conversations/{conversation}", {"approval": "read_only"})
    fresh.enqueue(text_reply("looked"))
    _, stream = ada.events(conversation)
    assert prompt(ada, conversation, "look")[0] == 202
    read_until(stream, is_final)
    assert {t["name"] for t in fresh.bodies[-1]["tools"]} == {"read", "grep", "list_dir"}


def test_cancel_ends_the_wait_and_the_call_is_not_run(ada, fresh, workspace):
    conversation = asking(ada)
    fresh.enqueue(tool_reply(("write", {"path": "cancelled.txt", "content": "no"})))
    stream, _, approval = until_waiting(ada, conversation)
    assert ada.call("POST", f"/api/conversations/{conversation}/cancel")[1] == {"cancelled": True}
    events = events_of(read_until(stream, is_final))
    assert [e["code"] for e in events if e["type"] == "error"] == ["cancelled"]
    assert not (workspace / "cancelled.txt").exists()
    assert decide(ada, conversation, approval["id"], "approve")[0] == 404


def test_a_decision_on_an_idle_conversation_is_404_at_once(ada):
    conversation = asking(ada)
    started = time.monotonic()
    status, payload = decide(ada, conversation, "toolu_none", "approve")
    assert status == 404 and payload["error"] == "not_found"
    assert time.monotonic() - started < 2  # no process is asked: none runs it


def test_approve_all_over_the_api_approves_the_runs_later_calls(ada, fresh, workspace):
    conversation = asking(ada)
    fresh.enqueue(tool_reply(("write", {"path": "all-1.txt", "content": "1"})),
                  tool_reply(("write", {"path": "all-2.txt", "content": "2"})),
                  text_reply("both"))  # fmt: skip
    stream, _, approval = until_waiting(ada, conversation)
    path = f"/api/conversations/{conversation}/approvals/{approval['id']}"
    assert ada.call("POST", path, {"decision": "approve", "approve_all": True})[0] == 200
    events = events_of(read_until(stream, is_final))
    assert [e["type"] for e in events].count("approval") == 0  # the second was not asked
    assert (workspace / "all-2.txt").read_text() == "2"


def test_a_server_killed_while_waiting_ends_the_run_interrupted(ada, fresh, workspace, live):
    """Last in this module: it restarts the server."""
    conversation = asking(ada)
    fresh.enqueue(tool_reply(("write", {"path": "crash.txt", "content": "no"})))
    until_waiting(ada, conversation)
    live.kill()
    live.start()
    _, replay = ada.events(conversation)
    events = events_of(read_until(replay, is_final, timeout=30))
    assert [e["code"] for e in events if e["type"] == "error"] == ["interrupted"]
    assert [e["type"] for e in events].count("approval") == 1
    assert not (workspace / "crash.txt").exists()
    listed = ada.call("GET", "/api/conversations")[1]["conversations"]
    assert next(c for c in listed if c["id"] == conversation)["state"] != "running"
