"""Images attached to a prompt (docs/API.md) through the real SDK path: the prompt's
``images`` name workspace files; the model gets them as base64 image blocks before the
text; the ``user`` event names them; later requests send the snapshot taken when the
prompt was sent (the file may change or go); hostile or wrong attachments are refused
with 400 and nothing runs or is stored; a fork carries its own copies."""

from __future__ import annotations

import base64
import hashlib

import pytest

from testkit.api_client import Api
from testkit.live import LiveServer
from tests import images as made
from tests.web.test_api import new_conversation, wait_state
from tests.web.test_branches import events_of


@pytest.fixture(scope="module")
def live(tmp_path_factory, model):
    server = LiveServer(tmp_path_factory.mktemp("images"), ANTHROPIC_API_KEY="test-key",
                        ANTHROPIC_BASE_URL=model.url, HARNESS_BASH="off",
                        HARNESS_RUNS_PER_MINUTE="1000", HARNESS_SSE_HEARTBEAT="1")  # fmt: skip
    server.start()
    server.create_users("ivy", "vic", "stan")
    yield server
    server.stop()


def token(live, name: str) -> Api:
    return Api(live.url, live.manage("create_api_token", name).strip())


def put_file(api: Api, path: str, data: bytes) -> None:
    status, body = api.call("PUT", f"/api/files/{path}", raw=data)
    assert status in (200, 201), body


def prompted_with(api: Api, path: str, data: bytes, content: str = "look") -> str:
    """A new conversation whose first prompt carried the image ``data`` (put at ``path``),
    answered."""
    put_file(api, path, data)
    cid = new_conversation(api)
    status, body = api.call("POST", f"/api/conversations/{cid}/prompt",
                            {"content": content, "images": [path]})  # fmt: skip
    assert status == 202, body
    wait_state(api, cid, "idle")
    return cid


def image_blocks(request_body: dict) -> list[dict]:
    return [block for message in request_body["messages"] if isinstance(message["content"], list)
            for block in message["content"] if block.get("type") == "image"]  # fmt: skip


def attachments_of(live, conversation_id: str) -> int:
    out = live.manage("shell", "-c", "from agent.models import Attachment; "
                      f"print(Attachment.objects.filter(conversation_id='{conversation_id}')"
                      ".count())")  # fmt: skip
    return int(out.split()[-1])


def test_an_attached_image_reaches_the_model_as_an_image_block_before_the_text(live, fresh):
    ivy = token(live, "ivy")
    shot = made.png(3, 2)
    put_file(ivy, "uploads/shot.png", shot)
    cid = new_conversation(ivy)
    prompt = {"content": "what is on it?", "images": ["uploads/shot.png"]}
    status, body = ivy.call("POST", f"/api/conversations/{cid}/prompt", prompt)
    assert status == 202, body
    wait_state(ivy, cid, "idle")
    content = next(m for m in fresh.bodies[-1]["messages"] if m["role"] == "user")["content"]
    assert content[0] == {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(shot).decode(),
        },
    }
    assert content[1]["text"] == "[Attached image, also in the workspace: uploads/shot.png]"
    assert content[2] == {"type": "text", "text": "what is on it?"}
    user = next(e for e in events_of(ivy, cid) if e["type"] == "user")
    assert user["images"] == [{"sha256": hashlib.sha256(shot).hexdigest(),
                               "media_type": "image/png", "name": "uploads/shot.png"}]  # fmt: skip


def test_later_requests_send_the_snapshot_even_when_the_file_changed_or_went(live, fresh):
    ivy = token(live, "ivy")
    first = made.png(4, 4, shade=10)
    cid = prompted_with(ivy, "uploads/later.png", first, "one")
    put_file(ivy, "uploads/later.png", made.png(4, 4, shade=99))  # changed…
    assert ivy.call("DELETE", "/api/files/uploads/later.png")[0] == 204  # … and gone
    assert ivy.call("POST", f"/api/conversations/{cid}/prompt", {"content": "two"})[0] == 202
    wait_state(ivy, cid, "idle")
    sent = image_blocks(fresh.bodies[-1])
    assert [b["source"]["data"] for b in sent] == [base64.b64encode(first).decode()]


@pytest.fixture(scope="module")
def wrong_files(live):
    ivy = token(live, "ivy")
    put_file(ivy, "uploads/notes.png", b"just text, named .png")
    put_file(ivy, "uploads/big.gif", made.gif(8001, 2))
    live.manage("shell", "-c", "import os; from agent.models import User; "
                "from agent.runs.workspaces import workspace_path; "
                "p = workspace_path(User.objects.get(username='ivy').pk) / 'uploads' / 'out'; "
                "os.path.lexists(p) or os.symlink('/etc/hostname', p)")  # fmt: skip
    return live, ivy


@pytest.mark.parametrize(
    ("images", "code", "says"),
    [
        (["uploads/notes.png"], "bad_image", "not a PNG, JPEG, GIF or WebP"),
        (["uploads/missing.png"], "bad_image", "cannot be sent"),
        (["../../../../etc/passwd"], "bad_image", "cannot be sent"),
        (["/etc/hostname"], "bad_image", "cannot be sent"),
        (["uploads/out"], "bad_image", "cannot be sent"),  # a symlink out of the workspace
        (["uploads/big.gif"], "bad_image", "8001×2 pixels"),
        ("uploads/shot.png", "bad_request", "list of workspace paths"),
        ([7], "bad_request", "list of workspace paths"),
        ([f"uploads/{n}.png" for n in range(11)], "bad_request", "up to 10 images"),
    ],
)
def test_a_wrong_attachment_is_refused_and_nothing_runs_or_is_stored(wrong_files, fresh, images,
                                                                     code, says):  # fmt: skip
    live, ivy = wrong_files
    cid = new_conversation(ivy)
    asked = len(fresh.requests)
    status, body = ivy.call("POST", f"/api/conversations/{cid}/prompt",
                            {"content": "look", "images": images})  # fmt: skip
    assert status == 400 and body["error"] == code and says in body["message"], body
    assert len(fresh.requests) == asked
    assert events_of(ivy, cid) == []
    assert attachments_of(live, cid) == 0


def test_a_viewer_learns_nothing_of_the_owners_files_through_images(live, fresh):
    ivy, vic = token(live, "ivy"), token(live, "vic")
    cid = new_conversation(ivy)
    ivy.call("PUT", f"/api/conversations/{cid}/members/vic", {"role": "viewer"})
    for path in ("uploads/shot.png", "uploads/missing.png"):
        status, body = vic.call("POST", f"/api/conversations/{cid}/prompt",
                                {"content": "x", "images": [path]})  # fmt: skip
        assert status == 403 and body["error"] == "forbidden", body
    stan = token(live, "stan")
    status, _ = stan.call("POST", f"/api/conversations/{cid}/prompt",
                          {"content": "x", "images": ["uploads/shot.png"]})  # fmt: skip
    assert status == 404


def test_a_collaborators_images_come_from_the_owners_workspace(live, fresh):
    ivy, vic = token(live, "ivy"), token(live, "vic")
    owners = made.png(5, 5, shade=1)
    put_file(ivy, "uploads/team.png", owners)
    put_file(vic, "uploads/team.png", made.png(5, 5, shade=2))  # vic's own: not this one
    cid = new_conversation(ivy)
    ivy.call("PUT", f"/api/conversations/{cid}/members/vic", {"role": "collaborator"})
    status, body = vic.call("POST", f"/api/conversations/{cid}/prompt",
                            {"content": "see", "images": ["uploads/team.png"]})  # fmt: skip
    assert status == 202, body
    wait_state(ivy, cid, "idle")
    sent = image_blocks(fresh.bodies[-1])
    assert [b["source"]["data"] for b in sent] == [base64.b64encode(owners).decode()]


def test_a_fork_carries_its_own_copies_of_the_images(live, fresh):
    ivy, vic = token(live, "ivy"), token(live, "vic")
    shot = made.gif(6, 6)
    put_file(ivy, "uploads/fork.gif", shot)
    cid = new_conversation(ivy)
    ivy.call("PUT", f"/api/conversations/{cid}/members/vic", {"role": "viewer"})
    ivy.call("POST", f"/api/conversations/{cid}/prompt",
             {"content": "keep", "images": ["uploads/fork.gif"]})  # fmt: skip
    wait_state(ivy, cid, "idle")
    status, body = vic.call("POST", f"/api/conversations/{cid}/fork", {})
    assert status == 201, body
    fork = body["id"]
    assert attachments_of(live, fork) == 1
    live.manage(
        "shell",
        "-c",
        f"from agent.models import Conversation; Conversation.objects.filter(id='{cid}').delete()",
    )  # the original goes
    assert vic.call("POST", f"/api/conversations/{fork}/prompt", {"content": "again"})[0] == 202
    wait_state(vic, fork, "idle")
    sent = image_blocks(fresh.bodies[-1])
    assert [b["source"]["data"] for b in sent] == [base64.b64encode(shot).decode()]


def test_an_edited_prompt_keeps_the_images_of_the_one_it_replaces(live, fresh):
    ivy = token(live, "ivy")
    shot = made.png(7, 7, shade=3)
    cid = prompted_with(ivy, "uploads/edit.png", shot, "first wording")
    seq = next(e["seq"] for e in events_of(ivy, cid) if e["type"] == "user")
    status, body = ivy.call("POST", f"/api/conversations/{cid}/prompt",
                            {"content": "second wording", "edit_of": seq})  # fmt: skip
    assert status == 202, body
    wait_state(ivy, cid, "idle")
    request = fresh.bodies[-1]
    assert [b["source"]["data"] for b in image_blocks(request)] == [base64.b64encode(shot).decode()]
    assert request["messages"][0]["content"][-1] == {"type": "text", "text": "second wording"}
