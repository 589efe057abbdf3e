"""Branches and forks (docs/API.md) through the API, a live Daphne server, the real SDK
and the test model server: edit, regenerate, switch, ``?branch=``, the SSE stream across a
switch, fork; what the model is sent is only the active branch's path."""

from __future__ import annotations

import json
import time

import pytest

from testkit.api_client import Api, read_until
from testkit.live import LiveServer
from testkit.model_server import text_reply


@pytest.fixture(scope="module")
def live(tmp_path_factory, model):
    server = LiveServer(tmp_path_factory.mktemp("branches"), ANTHROPIC_API_KEY="test-key",
                        ANTHROPIC_BASE_URL=model.url, HARNESS_BASH="off",
                        HARNESS_SSE_HEARTBEAT="1", HARNESS_RUNS_PER_MINUTE="200",
                        HARNESS_CONCURRENT_RUNS="5")  # fmt: skip
    server.start()
    server.create_users("ann", "ben")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def ann(live):
    return Api(live.url, live.manage("create_api_token", "ann").strip())


@pytest.fixture(scope="module")
def ben(live):
    return Api(live.url, live.manage("create_api_token", "ben").strip())


def idle(api: Api, conversation: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = api.call("GET", f"/api/conversations/{conversation}")
        if status == 200 and body["state"] != "running":
            return
        time.sleep(0.05)
    raise AssertionError("the prompt never ended")


def events_of(api: Api, conversation: str, query: str = "") -> list[dict]:
    """The replay of a stream (its stored events), read until the stream goes quiet."""
    response, stream = api.events(conversation)
    if query:
        response.close()
        import http.client

        connection = http.client.HTTPConnection(api.host, api.port, timeout=30)
        connection.request("GET", f"/api/conversations/{conversation}/events{query}",
                           headers=api._headers())  # fmt: skip
        response = connection.getresponse()
        from testkit.api_client import _parse

        stream = _parse(response, connection)
    seen = []
    for item in stream:
        if item[0] == "comment" and item[1].strip() == "heartbeat":
            break
        if item[0] == "event":
            seen.append(item[2])
    response.close()
    return seen


def texts(events: list[dict], kind: str) -> list[str]:
    return [e["content"] for e in events if e["type"] == kind]


def asked(model) -> list[list[str]]:
    """Each request's user texts, in order (what the model was sent)."""
    out = []
    for body in model.bodies:
        said = []
        for message in body["messages"]:
            content = message["content"]
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            said += [f"{message['role']}:{b['text']}" for b in blocks if b.get("type") == "text"]
        out.append(said)
    return out


def two_exchanges(api: Api, model) -> str:
    status, body = api.call("POST", "/api/conversations", {})
    conversation = body["id"]
    model.enqueue(text_reply("Answer one"))
    assert api.call("POST", f"/api/conversations/{conversation}/prompt",
                    {"content": "first"})[0] == 202  # fmt: skip
    idle(api, conversation)
    model.enqueue(text_reply("Answer two"))
    assert api.call("POST", f"/api/conversations/{conversation}/prompt",
                    {"content": "second"})[0] == 202  # fmt: skip
    idle(api, conversation)
    return conversation


def seq_of(events: list[dict], kind: str, content: str) -> int:
    return next(e["seq"] for e in events if e["type"] == kind and e["content"] == content)


def test_an_edited_prompt_starts_a_branch_the_model_sees_alone(ann, model, fresh):
    conversation = two_exchanges(ann, model)
    second = seq_of(events_of(ann, conversation), "user", "second")
    model.reset()
    model.enqueue(text_reply("Answer to the edit"))
    status, _ = ann.call("POST", f"/api/conversations/{conversation}/prompt",
                         {"content": "second, edited", "edit_of": second})  # fmt: skip
    assert status == 202
    idle(ann, conversation)
    # The model was sent the path: the first exchange and the edited prompt, not "second".
    assert asked(model)[-1] == ["user:first", "assistant:Answer one", "user:second, edited"]
    path = events_of(ann, conversation)
    assert texts(path, "user") == ["first", "second, edited"]
    assert texts(path, "text") == ["Answer one", "Answer to the edit"]
    assert [e["seq"] for e in path] == sorted(e["seq"] for e in path)
    new = [e for e in path if e["seq"] > second]
    assert new and all(e.get("branch") == 1 for e in new)
    assert all("branch" not in e for e in path if e["seq"] < second)
    status, listed = ann.call("GET", f"/api/conversations/{conversation}/branches")
    assert status == 200
    branches = {b["id"]: b for b in listed["branches"]}
    assert set(branches) == {0, 1}
    assert branches[1]["active"] and not branches[0]["active"]
    assert branches[1]["fork_seq"] == second - 1  # the event just before the prompt
    assert branches[0]["head_seq"] < branches[1]["head_seq"]
    # The first branch is still whole, read by ?branch=0 (nothing was changed or deleted).
    old = events_of(ann, conversation, "?branch=0")
    assert texts(old, "user") == ["first", "second"]
    assert texts(old, "text") == ["Answer one", "Answer two"]


def test_switching_back_restores_the_history_the_model_continues_from(ann, model, fresh):
    conversation = two_exchanges(ann, model)
    second = seq_of(events_of(ann, conversation), "user", "second")
    model.enqueue(text_reply("Edited answer"))
    ann.call("POST", f"/api/conversations/{conversation}/prompt",
             {"content": "other", "edit_of": second})  # fmt: skip
    idle(ann, conversation)
    status, body = ann.call("POST", f"/api/conversations/{conversation}/branches/0/activate")
    assert status == 200 and body["active"] == 0
    path = events_of(ann, conversation)
    assert texts(path, "user") == ["first", "second"]
    model.reset()
    model.enqueue(text_reply("Third answer"))
    ann.call("POST", f"/api/conversations/{conversation}/prompt", {"content": "third"})
    idle(ann, conversation)
    assert asked(model)[-1] == ["user:first", "assistant:Answer one", "user:second",
                                "assistant:Answer two", "user:third"]  # fmt: skip
    assert texts(events_of(ann, conversation), "user") == ["first", "second", "third"]


def test_regenerate_answers_the_last_prompt_again_on_a_new_branch(ann, model, fresh):
    conversation = two_exchanges(ann, model)
    model.reset()
    model.enqueue(text_reply("Answer two, again"))
    status, body = ann.call("POST", f"/api/conversations/{conversation}/regenerate", {})
    assert status == 202 and body == {"accepted": True}
    idle(ann, conversation)
    assert asked(model)[-1] == ["user:first", "assistant:Answer one", "user:second"]
    path = events_of(ann, conversation)
    assert texts(path, "user") == ["first", "second"]  # no new prompt event
    assert texts(path, "text") == ["Answer one", "Answer two, again"]
    statuses = [e for e in path if e["type"] == "status" and e["state"] == "idle"]
    assert len(statuses) == 2  # the first prompt's end, and the answer given again


def test_a_stream_across_a_switch_gets_the_branch_event_then_the_new_path(ann, model, fresh):
    conversation = two_exchanges(ann, model)
    before = events_of(ann, conversation)
    second = seq_of(before, "user", "second")
    model.enqueue(text_reply("Edited"))
    ann.call("POST", f"/api/conversations/{conversation}/prompt",
             {"content": "edited", "edit_of": second})  # fmt: skip
    idle(ann, conversation)
    head = events_of(ann, conversation)[-1]["seq"]
    response, stream = ann.events(conversation, last_event_id=head)
    read_until(stream, lambda item: item[0] == "comment")  # connected, caught up
    assert ann.call("POST", f"/api/conversations/{conversation}/branches/0/activate")[0] == 200
    items = read_until(stream, lambda item: item[0] == "event" and item[2]["type"] == "status"
                       and item[2]["state"] == "idle")  # fmt: skip
    response.close()
    got = [item for item in items if item[0] == "event"]
    assert got[0][2]["type"] == "branch"
    assert got[0][2]["active"] == 0 and got[0][2]["fork_seq"] == second - 1 == int(got[0][1])
    after = [item[2] for item in got[1:]]
    assert [e["seq"] for e in after] == [e["seq"] for e in before if e["seq"] > second - 1]
    # A reader that stopped on the other branch is brought back exactly the same way.
    response, stream = ann.events(conversation, last_event_id=head)
    items = read_until(stream, lambda item: item[0] == "event" and item[2]["type"] == "status"
                       and item[2]["state"] == "idle")  # fmt: skip
    response.close()
    got = [item[2] for item in items if item[0] == "event"]
    assert got[0]["type"] == "branch" and got[0]["fork_seq"] == second - 1
    assert [e["seq"] for e in got[1:]] == [e["seq"] for e in before if e["seq"] > second - 1]


def test_fork_copies_the_active_path_into_a_new_conversation_of_the_caller(ann, model, fresh):
    conversation = two_exchanges(ann, model)
    path = events_of(ann, conversation)
    at = seq_of(path, "text", "Answer one")
    status, body = ann.call("POST", f"/api/conversations/{conversation}/fork", {"at": at})
    assert status == 201
    copy = body["id"]
    copied = events_of(ann, copy)
    assert [e["seq"] for e in copied] == list(range(1, len(copied) + 1))
    assert texts(copied, "user") == ["first"] and texts(copied, "text") == ["Answer one"]
    model.reset()
    model.enqueue(text_reply("Forked answer"))
    ann.call("POST", f"/api/conversations/{copy}/prompt", {"content": "next"})
    idle(ann, copy)
    assert asked(model)[-1] == ["user:first", "assistant:Answer one", "user:next"]
    assert texts(events_of(ann, conversation), "user") == ["first", "second"]  # untouched


def test_branch_requests_that_cannot_be_done_change_nothing(ann, ben, model, fresh):
    conversation = two_exchanges(ann, model)
    path = events_of(ann, conversation)
    answer = seq_of(path, "text", "Answer one")
    url = f"/api/conversations/{conversation}"
    for body in ({"content": "x", "edit_of": answer}, {"content": "x", "edit_of": 9999},
                 {"content": "x", "edit_of": "1"}):  # fmt: skip
        status, error = ann.call("POST", f"{url}/prompt", body)
        assert status == 400, (body, error)
    assert ann.call("POST", f"{url}/regenerate", {"of": answer})[0] == 400
    assert ann.call("POST", f"{url}/regenerate", raw=b"not json")[0] == 400
    assert ann.call("POST", f"{url}/branches/7/activate")[0] == 404
    assert ann.call("GET", f"{url}/events?branch=7")[0] == 404
    assert ann.call("POST", f"{url}/fork", {"at": "x"})[0] == 400
    # Another user's conversation: not found, for every one of these.
    for method, path_, body in (("POST", "/fork", {}), ("GET", "/branches", None),
                                ("POST", "/regenerate", {}),
                                ("POST", "/branches/0/activate", None)):  # fmt: skip
        assert ben.call(method, f"{url}{path_}", body)[0] == 404
    assert [b["id"] for b in ann.call("GET", f"{url}/branches")[1]["branches"]] == [0]
    assert events_of(ann, conversation) == path


def test_branching_while_a_prompt_runs_is_409(ann, model, fresh):
    conversation = two_exchanges(ann, model)
    second = seq_of(events_of(ann, conversation), "user", "second")
    model.enqueue(text_reply("slow " * 40, chunk=2, delay=0.05))
    ann.call("POST", f"/api/conversations/{conversation}/prompt", {"content": "long one"})
    url = f"/api/conversations/{conversation}"
    assert ann.call("POST", f"{url}/regenerate", {})[0] == 409
    assert ann.call("POST", f"{url}/prompt", {"content": "e", "edit_of": second})[0] == 409
    assert ann.call("POST", f"{url}/branches/0/activate")[0] == 409
    ann.call("POST", f"{url}/cancel")
    idle(ann, conversation)
    assert [b["id"] for b in ann.call("GET", f"{url}/branches")[1]["branches"]] == [0]
    json.dumps(events_of(ann, conversation))  # still a readable log
