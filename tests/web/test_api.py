"""The HTTP + SSE API (docs/API.md), every row, against a live Daphne server."""

from __future__ import annotations

import time
import uuid

import pytest

from testkit.api_client import Api, read_until
from testkit.live import LiveServer
from testkit.model_server import message_reply, text_reply, tool_reply


@pytest.fixture(scope="module")
def live(tmp_path_factory, model):
    server = LiveServer(tmp_path_factory.mktemp("api"), ANTHROPIC_API_KEY="test-key",
                        ANTHROPIC_BASE_URL=model.url, HARNESS_BASH="off",
                        HARNESS_SSE_HEARTBEAT="1", HARNESS_RUNS_PER_MINUTE="100",
                        HARNESS_CONCURRENT_RUNS="5")  # fmt: skip
    server.start()
    server.create_users("alice", "bob")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def alice(live):
    return Api(live.url, live.manage("create_api_token", "alice").strip())


@pytest.fixture(scope="module")
def bob(live):
    return Api(live.url, live.manage("create_api_token", "bob", "--name", "ci").strip())


def new_conversation(api: Api, **body) -> str:
    status, payload = api.call("POST", "/api/conversations", body)
    assert status == 201, payload
    return payload["id"]


def wait_state(api: Api, conversation_id: str, state: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = api.call("GET", "/api/conversations")[1]["conversations"]
        if next(c for c in listed if c["id"] == conversation_id)["state"] == state:
            return
        time.sleep(0.05)
    raise AssertionError(f"{conversation_id} never became {state}")


def is_final(item) -> bool:
    return (
        item[0] == "event" and item[2]["type"] == "status" and item[2]["state"] in ("idle", "error")
    )


def test_create_and_list_conversations(alice, bob):
    first = new_conversation(alice, title="  API   chat ", model="claude-sonnet-4-5")
    assert uuid.UUID(first)
    second = new_conversation(alice)
    status, payload = alice.call("GET", "/api/conversations")
    assert status == 200
    mine = {c["id"]: c for c in payload["conversations"]}
    assert {first, second} <= set(mine)
    assert mine[first]["title"] == "API chat" and mine[first]["state"] == "idle"
    assert set(mine[first]) == {"id", "title", "created", "state", "role", "pinned", "archived"}
    assert mine[first]["role"] == "owner"
    theirs = {c["id"] for c in bob.call("GET", "/api/conversations")[1]["conversations"]}
    assert first not in theirs and second not in theirs


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]", b'{"title": 5}', b'{"model": "gpt-4"}'])
def test_create_with_a_bad_body_is_400(alice, raw):
    status, payload = alice.call("POST", "/api/conversations", raw=raw)
    assert status == 400 and payload["error"] == "bad_request" and payload["message"]


@pytest.mark.parametrize("token", [None, "wrong", "hrn_not-a-real-token"])
def test_a_missing_or_wrong_token_is_401(live, token):
    api = Api(live.url, token)
    for method, path in [("GET", "/api/conversations"), ("POST", "/api/conversations"),
                         ("POST", f"/api/conversations/{uuid.uuid4()}/prompt")]:  # fmt: skip
        status, payload = api.call(method, path, {})
        assert status == 401 and payload["error"] == "unauthorized"


def test_wrong_method_is_405(alice):
    status, payload = alice.call("DELETE", "/api/conversations")
    assert status == 405 and payload["error"] == "method_not_allowed"


def test_another_users_conversation_is_404_on_every_endpoint(alice, bob):
    conversation = new_conversation(alice)
    base = f"/api/conversations/{conversation}"
    for method, path, body in [("POST", f"{base}/prompt", {"content": "hi"}),
                               ("POST", f"{base}/cancel", None)]:  # fmt: skip
        status, payload = bob.call(method, path, body)
        assert status == 404 and payload["error"] == "not_found"
    response, _ = bob.events(conversation)
    assert response.status == 404
    response.close()


def test_prompt_streams_over_sse_replay_and_live_without_gaps(alice, fresh, live):
    conversation = new_conversation(alice)
    response, stream = alice.events(conversation)
    assert response.status == 200
    assert response.getheader("Content-Type").startswith("text/event-stream")
    fresh.enqueue(tool_reply(("list_dir", {"path": "."})), text_reply("Done listing.", delay=0.01))
    status, payload = alice.call("POST", f"/api/conversations/{conversation}/prompt",
                                 {"content": "list it"})  # fmt: skip
    assert (status, payload) == (202, {"accepted": True})
    items = read_until(stream, is_final)
    events = [item[2] for item in items if item[0] == "event"]
    assert [item[1] for item in items if item[0] == "event"] == [e["seq"] for e in events]
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1))  # live: every seq, deltas included
    kinds = [e["type"] for e in events if e["type"] != "text_delta"]
    assert kinds[0] == "user" and "tool_call" in kinds and "tool_result" in kinds
    assert kinds[-1] == "status" and events[-1]["state"] == "idle"
    assert all({"type", "seq", "timestamp"} <= set(e) for e in events)

    # Replay: from the start, after ?since, and after Last-Event-ID; stored events only.
    _, replay = alice.events(conversation)
    stored = [item[2] for item in read_until(replay, is_final) if item[0] == "event"]
    assert [e["type"] for e in stored] == kinds
    middle = stored[2]["seq"]
    for kwargs in ({"since": middle}, {"last_event_id": middle}):
        _, after = alice.events(conversation, **kwargs)
        got = [item[2] for item in read_until(after, is_final) if item[0] == "event"]
        assert got == [e for e in stored if e["seq"] > middle]
    # API prompts stay out of the page's prompt history (typed prompts go in: test_consumer)
    code = "from agent.models import User; print(User.objects.get(username='alice').prompt_history)"
    assert live.manage("shell", "-c", code).strip().splitlines()[-1] == "[]"


def test_sse_sends_heartbeats(alice):
    conversation = new_conversation(alice)
    _, stream = alice.events(conversation)
    assert read_until(stream, lambda item: item == ("comment", "heartbeat"), timeout=5)


def test_sse_rejects_a_bad_since(alice):
    conversation = new_conversation(alice)
    response, _ = alice.events(conversation, since=-3)
    assert response.status == 400
    response.close()


def test_second_prompt_while_running_is_409_and_cancel_reports(alice, fresh):
    conversation = new_conversation(alice)
    assert alice.call("POST", f"/api/conversations/{conversation}/cancel") == (
        200, {"cancelled": False})  # fmt: skip
    fresh.enqueue(text_reply("slow " * 300, delay=0.01))
    assert alice.call("POST", f"/api/conversations/{conversation}/prompt",
                      {"content": "one"})[0] == 202  # fmt: skip
    wait_state(alice, conversation, "running")
    status, payload = alice.call("POST", f"/api/conversations/{conversation}/prompt",
                                 {"content": "two"})  # fmt: skip
    assert status == 409 and payload["error"] == "prompt_running"
    assert alice.call("POST", f"/api/conversations/{conversation}/cancel") == (
        200, {"cancelled": True})  # fmt: skip
    wait_state(alice, conversation, "error")
    _, replay = alice.events(conversation)
    stored = [item[2] for item in read_until(replay, is_final) if item[0] == "event"]
    assert [e.get("code") for e in stored if e["type"] == "error"] == ["cancelled"]
    assert [e["content"] for e in stored if e["type"] == "user"] == ["one"]


@pytest.mark.parametrize(
    "raw", [b"", b"nope", b'{"content": ""}', b'{"content": 3}', b'["content"]', b"{}"]
)
def test_prompt_with_a_bad_body_is_400(alice, raw):
    conversation = new_conversation(alice)
    status, payload = alice.call("POST", f"/api/conversations/{conversation}/prompt", raw=raw)
    assert status == 400 and payload["error"] == "bad_request"


def test_a_revoked_token_stops_working(live):
    token = live.manage("create_api_token", "bob").strip()
    api = Api(live.url, token)
    assert api.call("GET", "/api/conversations")[0] == 200
    live.manage("shell", "-c", "from agent.models import ApiToken; from django.utils import "
                "timezone; ApiToken.objects.filter(user__username='bob').update("
                "revoked=timezone.now())")  # fmt: skip
    assert api.call("GET", "/api/conversations")[0] == 401


def test_create_api_token_for_an_unknown_user_fails(live):
    with pytest.raises(RuntimeError, match="no user named"):
        live.manage("create_api_token", "nobody-here")


def test_patch_changes_title_model_and_thinking_and_they_reach_the_next_request(alice, fresh):
    cid = new_conversation(alice)
    status, body = alice.call("PATCH", f"/api/conversations/{cid}",
                              {"title": "  Renamed \n chat ", "model": "claude-sonnet-4-5",
                               "thinking": "low"})  # fmt: skip
    assert status == 200, body
    assert (body["title"], body["model"], body["thinking"]) == (
        "Renamed chat", "claude-sonnet-4-5", "low")  # fmt: skip
    assert alice.call("GET", f"/api/conversations/{cid}")[1]["thinking"] == "low"
    fresh.enqueue(text_reply("thought about it"))
    assert alice.call("POST", f"/api/conversations/{cid}/prompt", {"content": "think"})[0] == 202
    wait_state(alice, cid, "idle")
    sent = fresh.bodies[-1]
    assert sent["model"] == "claude-sonnet-4-5"
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert sent["max_tokens"] == 4096 + 2048  # the answer's own budget stays
    assert alice.call("PATCH", f"/api/conversations/{cid}", {"thinking": "off"})[0] == 200
    fresh.enqueue(text_reply("no thinking"))
    alice.call("POST", f"/api/conversations/{cid}/prompt", {"content": "plain"})
    wait_state(alice, cid, "idle")
    assert "thinking" not in fresh.bodies[-1] and fresh.bodies[-1]["max_tokens"] == 4096


@pytest.mark.parametrize(
    "body",
    [{"thinking": "extreme"}, {"model": "gpt-5"}, {"title": 7}, {"title": "x" * 201},
     {"approval": "always"}, {"colour": "red"}, {"title": "ok", "thinking": "maybe"}],
)  # fmt: skip
def test_patch_with_a_bad_value_is_400_and_changes_nothing(alice, body):
    cid = new_conversation(alice, title="Kept")
    status, answer = alice.call("PATCH", f"/api/conversations/{cid}", body)
    assert status == 400 and answer["error"] == "bad_request", answer
    assert alice.call("GET", f"/api/conversations/{cid}")[1]["title"] == "Kept"


def test_patch_of_another_users_conversation_is_404(live, alice):
    bob = Api(live.url, live.manage("create_api_token", "bob").strip())  # (an earlier test
    cid = new_conversation(alice, title="Mine")  # revokes the module's token of bob's)
    assert bob.call("PATCH", f"/api/conversations/{cid}", {"title": "Theirs"})[0] == 404
    assert bob.call("GET", f"/api/conversations/{cid}")[0] == 404
    assert alice.call("GET", f"/api/conversations/{cid}")[1]["title"] == "Mine"


def test_the_deployments_instructions_reach_every_runs_system_prompt(live, alice, fresh):
    live.manage("shell", "-c", "from agent.models import DeploymentInstructions as D; "
                "D(text='Deployment rule: answer in French.').save()")  # fmt: skip
    try:
        cid = new_conversation(alice)
        fresh.enqueue(text_reply("Bonjour"))
        alice.call("POST", f"/api/conversations/{cid}/prompt", {"content": "hi"})
        wait_state(alice, cid, "idle")
        system = fresh.bodies[-1]["system"]
        assert "Deployment rule: answer in French." in system and "Today's date is" in system
    finally:
        live.manage("shell", "-c", "from agent.models import DeploymentInstructions as D; "
                    "D(text='').save()")  # fmt: skip


def test_compact_on_request_summarises_and_the_stream_shows_it(alice, fresh, live):
    cid = new_conversation(alice)
    for i in range(3):
        alice.call("POST", f"/api/conversations/{cid}/prompt", {"content": f"step {i}"})
        wait_state(alice, cid, "idle")
    other = Api(live.url, live.manage("create_api_token", "bob").strip())
    assert other.call("POST", f"/api/conversations/{cid}/compact")[0] == 404
    fresh.enqueue(message_reply("Three steps were asked for."))
    status, body = alice.call("POST", f"/api/conversations/{cid}/compact")
    assert (status, body) == (202, {"accepted": True})
    wait_state(alice, cid, "idle")
    _, stream = alice.events(cid)
    events = [item[2] for item in read_until(stream, lambda i: i[0] == "event"
              and i[2]["type"] == "compaction") if item[0] == "event"]  # fmt: skip
    done = events[-1]
    assert done["summary"] == "Three steps were asked for." and done["through_seq"] > 0
    assert done["tokens_before"] > done["tokens_after"] > 0
    fresh.enqueue(text_reply("after"))
    alice.call("POST", f"/api/conversations/{cid}/prompt", {"content": "go on"})
    wait_state(alice, cid, "idle")
    sent = fresh.bodies[-1]["messages"]
    assert "Three steps were asked for." in sent[0]["content"][0]["text"]
    assert "step 0" not in str(sent) and "step 1" in str(sent)  # the last two exchanges kept


def test_compact_while_a_prompt_runs_is_409(alice, fresh):
    cid = new_conversation(alice)
    fresh.enqueue(text_reply("slow " * 50, delay=0.05))
    alice.call("POST", f"/api/conversations/{cid}/prompt", {"content": "long"})
    status, body = alice.call("POST", f"/api/conversations/{cid}/compact")
    assert status == 409 and body["error"] == "prompt_running"
    wait_state(alice, cid, "idle")


def test_a_conversations_instructions_reach_its_runs_system_prompt_last(live, alice, fresh):
    cid = new_conversation(alice)
    url = f"/api/conversations/{cid}"
    status, body = alice.call("PATCH", url, {"instructions": "  Conversation rule: haiku.  "})
    assert status == 200 and body["instructions"] == "Conversation rule: haiku."
    status, body = alice.call("PATCH", url, {"instructions": "x" * 4001, "title": "kept out"})
    assert status == 400 and body["error"] == "bad_request" and "4000" in body["message"]
    assert alice.call("GET", url)[1]["title"] == ""  # nothing changed
    fresh.enqueue(text_reply("Five seven five"))
    alice.call("POST", f"{url}/prompt", {"content": "hi"})
    wait_state(alice, cid, "idle")
    system = fresh.bodies[-1]["system"]
    assert system.index("Today's date is") < system.index("Conversation rule: haiku.")
    # A collaborator may change them (they steer as a prompt does), nothing else; a viewer not.
    other = Api(live.url, live.manage("create_api_token", "bob").strip())
    assert alice.call("PUT", f"{url}/members/bob", {"role": "collaborator"})[0] == 200
    assert other.call("PATCH", url, {"instructions": "Be brief."})[1]["instructions"] == "Be brief."
    assert other.call("PATCH", url, {"instructions": "x", "pinned": True})[0] == 403
    assert alice.call("PUT", f"{url}/members/bob", {"role": "viewer"})[0] == 200
    assert other.call("PATCH", url, {"instructions": "Mine now."})[0] == 403
    assert alice.call("GET", url)[1]["instructions"] == "Be brief."


def test_pinned_ones_list_first_and_archived_ones_only_when_asked(alice):
    first, second, third = (new_conversation(alice, title=f"order {n}") for n in range(3))
    status, body = alice.call("PATCH", f"/api/conversations/{first}", {"pinned": True})
    assert status == 200 and body["pinned"] is True
    assert alice.call("PATCH", f"/api/conversations/{second}", {"archived": True})[0] == 200
    listed = alice.call("GET", "/api/conversations")[1]["conversations"]
    ids = [c["id"] for c in listed]
    assert ids[0] == first and second not in ids and ids.index(third) > 0
    archived = alice.call("GET", "/api/conversations?archived=true")[1]["conversations"]
    assert [c["id"] for c in archived if c["id"] in (first, second, third)] == [second]
    assert archived[0]["archived"] is True
    assert alice.call("GET", "/api/conversations?archived=maybe")[0] == 400
    status, body = alice.call("PATCH", f"/api/conversations/{first}", {"pinned": "yes"})
    assert status == 400 and "'pinned' must be true or false" in body["message"]
    # A rename or a setting is not activity: the order of the others stays.
    before = [c["id"] for c in alice.call("GET", "/api/conversations")[1]["conversations"]]
    alice.call("PATCH", f"/api/conversations/{before[-1]}", {"title": "renamed", "thinking": "low"})
    assert [c["id"] for c in alice.call("GET", "/api/conversations")[1]["conversations"]] == before
