"""Projects against a real root server (its broker, each user's file host and sandbox):
an empty project, a worktree per conversation, checkpoints after bash's changes, rewind
and its undo, edit/regenerate's restore, changes, commit authorship, the archive, who may
do what, and an agent that tries to plant configuration for git to run."""

from __future__ import annotations

import gzip
import http.client
import io
import json
import os
import tarfile

import pytest

from testkit.api_client import Api, read_until
from testkit.live import LiveServer
from testkit.model_server import text_reply, tool_reply
from tests.conftest import require_bwrap
from tests.web.test_cli_agents_live import prompt_and_read

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)")


@pytest.fixture(scope="module")
def live(tmp_path_factory, model):
    require_bwrap()
    server = LiveServer(tmp_path_factory.mktemp("projects"), ANTHROPIC_API_KEY="test-key",
                        ANTHROPIC_BASE_URL=model.url,
                        HARNESS_RUNS_PER_MINUTE="1000")  # fmt: skip
    server.start()
    server.create_users("alice", "bob", "carol")
    yield server
    server.stop()


def _api(live, name: str) -> Api:
    return Api(live.url, live.manage("create_api_token", name).strip())


@pytest.fixture(scope="module")
def alice(live):
    return _api(live, "alice")


@pytest.fixture(scope="module")
def project(alice):
    status, made = alice.call("POST", "/api/projects", {"name": " my   app "})
    assert (status, made["state"]) == (201, "ready"), made
    return made["id"]


def _conversation(api: Api, project: str, **more) -> dict:
    status, made = api.call("POST", "/api/conversations", {"project": project, **more})
    assert status == 201, made
    status, shown = api.call("GET", f"/api/conversations/{made['id']}")
    assert status == 200
    return shown


def _bash(fresh, api, conversation, command: str) -> tuple[list[dict], str]:
    fresh.enqueue(tool_reply(("bash", {"command": command})), text_reply("done"))
    events = prompt_and_read(api, conversation["id"], "run it", since=conversation.get("seq", 0))
    conversation["seq"] = events[-1]["seq"]
    results = [e for e in events if e["type"] == "tool_result"]
    assert results, events
    result = results[0]
    return events, json.loads(result["result"]).get("output", result["result"])


def _changes(api, conversation) -> list[str]:
    status, body = api.call("GET", f"/api/conversations/{conversation['id']}/changes")
    assert status == 200, body
    return [f["path"] for f in body["files"]]


def test_an_empty_project(alice, project):
    status, shown = alice.call("GET", f"/api/projects/{project}")
    assert status == 200
    assert shown == {"id": project, "name": "my app", "git_url": "", "default_branch": "main",
                     "state": "ready"}  # fmt: skip
    listed = alice.call("GET", "/api/projects")[1]["projects"]
    assert [p["id"] for p in listed] == [project]
    status, refused = alice.call("POST", "/api/projects", {"name": ""})
    assert (status, refused["error"]) == (400, "bad_request")


def test_a_conversation_works_in_its_own_worktree_with_checkpoints(alice, project, fresh):
    first, second = _conversation(alice, project), _conversation(alice, project)
    assert first["project"] == project and first["branch"] == f"harness/{first['id'][:8]}"
    command = "echo one > a.txt; git status --short; git branch --show-current"
    events, out = _bash(fresh, alice, first, command)
    assert out.split() == ["??", "a.txt", first["branch"]], out
    kinds = [e["type"] for e in events]
    assert kinds[0] == "checkpoint" and kinds[1] == "user"  # when the prompt started
    after = kinds.index("tool_result") + 1
    assert events[after]["type"] == "checkpoint" and events[after]["files"] == ["a.txt"]
    listed = alice.call("GET", f"/api/conversations/{first['id']}/checkpoints")[1]["checkpoints"]
    assert [c["files"] for c in listed] == [[], ["a.txt"]]
    assert listed[1]["id"] == events[after]["id"] and listed[1]["seq"] == events[after]["seq"]
    # The other conversation of the project sees none of it, and no one's workspace.
    _, out = _bash(fresh, alice, second, "ls -A; ls /projects/*/trees | wc -l")
    assert out.split() == [".git", "1"]
    assert _changes(alice, first) == ["a.txt"] and _changes(alice, second) == []
    # Its agent sees no other worktree's administrative directory (their HEAD, index,
    # lock): it can neither read them nor unlock one for a prune that would drop it.
    other, own = first["id"].replace("-", ""), second["id"].replace("-", "")
    _, out = _bash(fresh, alice, second, f"cd $(git rev-parse --git-common-dir)/worktrees; ls; "
                   f"touch {other} 2>&1; git worktree prune; echo pruned")  # fmt: skip
    assert out.split()[0] == own and "Read-only file system" in out and "pruned" in out, out
    _, out = _bash(fresh, alice, first, "git status --short")
    assert out.split() == ["??", "a.txt"], out


def test_restore_and_its_undo(alice, project, fresh):
    conversation = _conversation(alice, project)
    _bash(fresh, alice, conversation, "echo v1 > keep.txt; echo x > gone.txt")
    _bash(fresh, alice, conversation, "echo v2 > keep.txt; rm gone.txt; mkdir new; touch new/n")
    listed = alice.call("GET", f"/api/conversations/{conversation['id']}/checkpoints")[1]
    first, last = listed["checkpoints"][1]["id"], listed["checkpoints"][-1]["id"]
    path = f"/api/conversations/{conversation['id']}/restore"
    status, body = alice.call("POST", path, {"checkpoint": first})
    assert status == 200, (body, alice.call("GET", f"/api/conversations/{conversation['id']}"))
    assert [e["type"] for e in body["checkpoints"]] == [
        "checkpoint"
    ]  # the state it replaced was recorded
    _, out = _bash(fresh, alice, conversation, "cat keep.txt; ls")
    assert out.split() == ["v1", "gone.txt", "keep.txt"]
    assert alice.call("POST", path, {"checkpoint": last})[0] == 200  # undone
    assert sorted(_changes(alice, conversation)) == ["keep.txt", "new/n"]
    status, body = alice.call("POST", path, {"checkpoint": "0" * 40})
    assert (status, body["error"]) == (404, "not_found")


def _until_idle(api, conversation, call) -> None:
    response, stream = api.events(conversation["id"], since=conversation["seq"], timeout=60)
    status, body = call()
    assert status == 202, body
    # Newer than what the test holds: after a branch switch the feed first replays the
    # active path from where the branches part, that path's old final status included.
    held = conversation["seq"]
    items = read_until(stream, lambda i: i[0] == "event" and i[2]["type"] == "status"
                       and i[2]["state"] in ("idle", "error") and i[2]["seq"] > held,
                       timeout=60)  # fmt: skip
    conversation["seq"] = items[-1][2]["seq"]


def _active_branch(api, cid) -> int:
    branches = api.call("GET", f"/api/conversations/{cid}/branches")[1]["branches"]
    return next(b["id"] for b in branches if b["active"])


def _activate(api, cid, branch, **body) -> None:
    path = f"/api/conversations/{cid}/branches/{branch}/activate"
    assert api.call("POST", path, body)[0] == 200


def test_regenerate_edit_and_switch_restore_the_files(alice, project, fresh):
    conversation = _conversation(alice, project)
    cid = conversation["id"]
    _bash(fresh, alice, conversation, "touch a")
    events, _ = _bash(fresh, alice, conversation, "touch b")
    second = next(e["seq"] for e in events if e["type"] == "user")
    assert sorted(_changes(alice, conversation)) == ["a", "b"]
    fresh.enqueue(text_reply("again"))
    regenerate = {"of": second}
    _until_idle(alice, conversation, lambda: alice.call(
        "POST", f"/api/conversations/{cid}/regenerate", regenerate))  # fmt: skip
    assert _changes(alice, conversation) == ["a"]
    regenerated = _active_branch(alice, cid)
    events, _ = _bash(fresh, alice, conversation, "touch c")
    third = next(e["seq"] for e in events if e["type"] == "user")
    # An edit that keeps the files: nothing restored.
    fresh.enqueue(text_reply("kept"))
    kept = {"content": "edited", "edit_of": third, "restore_files": False}
    _until_idle(alice, conversation, lambda: alice.call(
        "POST", f"/api/conversations/{cid}/prompt", kept))  # fmt: skip
    assert _changes(alice, conversation) == ["a", "c"]
    _activate(alice, cid, regenerated, restore_files=False)
    # An edit that does: the files of when that prompt started.
    fresh.enqueue(text_reply("edited again"))
    edit = {"content": "edited", "edit_of": third}
    _until_idle(alice, conversation, lambda: alice.call(
        "POST", f"/api/conversations/{cid}/prompt", edit))  # fmt: skip
    assert _changes(alice, conversation) == ["a"]
    edited = _active_branch(alice, cid)
    # Switching to a branch brings its newest files back, unless asked not to.
    _activate(alice, cid, regenerated)
    assert _changes(alice, conversation) == ["a", "c"]
    _activate(alice, cid, edited, restore_files=False)
    assert _changes(alice, conversation) == ["a", "c"]
    _activate(alice, cid, regenerated)
    _activate(alice, cid, edited)
    assert _changes(alice, conversation) == ["a"]


def test_commit_archive_and_who_may(live, alice, project, fresh):
    conversation = _conversation(alice, project)
    cid = conversation["id"]
    _bash(fresh, alice, conversation, "mkdir src; echo 'print(1)' > src/app.py")
    status, made = alice.call("POST", f"/api/conversations/{cid}/commit", {"message": "Add app"})
    assert status == 201, made
    _, out = _bash(
        fresh, alice, conversation, "git log -1 --format='%an <%ae>|%cn|%s'; git status --short"
    )
    assert out.strip() == "alice <alice@users.harness.invalid>|alice|Add app"
    status, body = alice.call("POST", f"/api/conversations/{cid}/commit", {"message": "again"})
    assert (status, body["error"]) == (409, "nothing_to_commit")
    connection = http.client.HTTPConnection(alice.host, alice.port, timeout=30)
    connection.request("GET", f"/api/conversations/{cid}/archive", headers=alice._headers())
    response = connection.getresponse()
    assert response.status == 200 and response.getheader("Content-Type") == "application/gzip"
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(response.read()))) as tar:
        assert sorted(m.name for m in tar.getmembers() if m.isfile()) == ["src/app.py"]
    bob, carol = _api(live, "bob"), _api(live, "carol")
    assert (
        alice.call("PUT", f"/api/conversations/{cid}/members/carol", {"role": "viewer"})[0] == 200
    )
    assert carol.call("GET", f"/api/conversations/{cid}/checkpoints")[0] == 200
    assert carol.call("GET", f"/api/conversations/{cid}/changes")[0] == 200  # the page's diff
    at = f"/api/conversations/{cid}"
    assert bob.call("GET", f"{at}/changes")[0] == 404
    for path, method, body in ((f"{at}/commit", "POST", {"message": "m"}),
                               (f"{at}/restore", "POST", {"checkpoint": made["commit"]}),
                               (f"{at}/archive", "GET", None)):  # fmt: skip
        assert carol.call(method, path, body)[0] == 403, path
        assert bob.call(method, path, body)[0] == 404, path
    assert bob.call("GET", f"/api/projects/{project}")[0] == 404
    assert bob.call("DELETE", f"/api/projects/{project}")[0] == 404
    assert bob.call("POST", "/api/conversations", {"project": project})[0] == 404
    assert bob.call("GET", "/api/projects")[1] == {"projects": []}


def test_an_agent_cannot_plant_configuration_for_git_to_run(alice, project, fresh):
    conversation = _conversation(alice, project)
    _, out = _bash(fresh, alice, conversation,
                   "git config core.fsmonitor 'touch /workspace/ran' 2>&1; "
                   "echo '#!/bin/sh' > $(git rev-parse --git-common-dir)/hooks/pre-commit 2>&1; "
                   "echo 'x filter=evil' > .gitattributes; echo x > x")  # fmt: skip
    assert "Read-only file system" in out or "could not lock" in out, out
    status, _ = alice.call("POST", f"/api/conversations/{conversation['id']}/commit",
                           {"message": "m"})  # fmt: skip
    assert status == 201
    _, out = _bash(fresh, alice, conversation, "ls")
    assert "ran" not in out.split()


def test_a_checkpoint_runs_where_no_other_project_is(alice, project, fresh):
    """The file host sees every project of the user; its checkpoint runs in a sandbox
    showing this conversation alone, so a `.git` file naming another project's worktree
    leads nowhere (in the file host's view, `git add` would record that worktree's HEAD)."""
    status, other = alice.call("POST", "/api/projects", {"name": "other"})
    assert status == 201, other
    theirs = _conversation(alice, other["id"])
    _bash(fresh, alice, theirs, "echo secret > s.txt")
    status, made = alice.call("POST", f"/api/conversations/{theirs['id']}/commit",
                              {"message": "theirs"})  # fmt: skip
    assert status == 201, made
    mine = _conversation(alice, project)
    admin = (f"/projects/{other['id'].replace('-', '')}/repo.git/worktrees/"
             f"{theirs['id'].replace('-', '')}")  # fmt: skip
    events, _ = _bash(fresh, alice, mine, f"mkdir peek; echo 'gitdir: {admin}' > peek/.git")
    recorded = [e for e in events if e["type"] == "checkpoint"][-1]
    _, out = _bash(fresh, alice, mine, f"git ls-tree -r {recorded['id']}; echo listed")
    assert made["commit"] not in out and "commit" not in out and "listed" in out, out


def test_the_agents_own_git_gc_runs_to_its_end(alice, project, fresh):
    conversation = _conversation(alice, project)
    command = (
        "echo x > x; git add x; git -c user.name=a -c user.email=a@a commit -qm x; "
        "git gc --quiet 2>&1; echo gc=$?; git count-objects -v | grep '^count'"
    )
    _, out = _bash(fresh, alice, conversation, command)
    assert "gc=0" in out and "count: 0" in out, out


def test_deleting_a_project_keeps_its_conversations(alice, fresh):
    status, made = alice.call("POST", "/api/projects", {"name": "short-lived"})
    conversation = _conversation(alice, made["id"])
    assert alice.call("DELETE", f"/api/projects/{made['id']}")[0] == 204
    assert alice.call("GET", f"/api/projects/{made['id']}")[0] == 404
    status, shown = alice.call("GET", f"/api/conversations/{conversation['id']}")
    assert status == 200 and shown["project"] is None


def test_the_file_tools_work_in_the_worktree(alice, project, fresh):
    conversation = _conversation(alice, project)
    fresh.enqueue(
        tool_reply(("write", {"path": "src/new.py", "content": "x = 1\n"}),
                   ("edit", {"path": "src/new.py", "old_str": "x = 1", "new_str": "x = 2"}),
                   ("list_dir", {"path": "."}),
                   ("read", {"path": ".harness-projects"})),
        text_reply("done"),
    )  # fmt: skip
    events = prompt_and_read(alice, conversation["id"], "write it")
    results = [e for e in events if e["type"] == "tool_result"]
    assert [r["isError"] for r in results] == [False, False, False, True], results
    assert "src" in results[2]["result"] and ".harness" not in results[2]["result"]
    files = [e["files"] for e in events if e["type"] == "checkpoint"]
    assert files == [[], ["src/new.py"], ["src/new.py"]]  # start, write, edit; not the reads
    status, body = alice.call("GET", f"/api/conversations/{conversation['id']}/changes")
    assert "+x = 2" in body["diff"]


def test_no_restore_while_a_prompt_runs(alice, project, fresh):
    conversation = _conversation(alice, project)
    cid = conversation["id"]
    _bash(fresh, alice, conversation, "touch a")
    first = alice.call("GET", f"/api/conversations/{cid}/checkpoints")[1]["checkpoints"][0]
    fresh.enqueue(tool_reply(("bash", {"command": "sleep 30"})), text_reply("slept"))
    response, stream = alice.events(cid, since=conversation["seq"], timeout=60)
    assert alice.call("POST", f"/api/conversations/{cid}/prompt", {"content": "wait"})[0] == 202
    read_until(stream, lambda i: i[0] == "event" and i[2]["type"] == "tool_call", timeout=30)
    status, body = alice.call("POST", f"/api/conversations/{cid}/restore",
                              {"checkpoint": first["id"]})  # fmt: skip
    assert (status, body["error"]) == (409, "prompt_running")
    assert alice.call("POST", f"/api/conversations/{cid}/cancel")[1] == {"cancelled": True}
    read_until(stream, lambda i: i[0] == "event" and i[2]["type"] == "status"
               and i[2]["state"] in ("idle", "error"), timeout=30)  # fmt: skip
    assert _changes(alice, conversation) == ["a"]


def _tar_gz(entries: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755 if name.endswith(".sh") else 0o644
            archive.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
    return out.getvalue()


def test_a_project_from_an_archive_and_a_hostile_archive_refused_whole(live, alice, fresh):
    """The archive's content is the first commit (GitHub's single top directory
    stripped, .gitignore honoured, the executable bit kept); a link out refuses it whole."""
    before = {p["id"] for p in alice.call("GET", "/api/projects")[1]["projects"]}
    data = _tar_gz({"app-main/README.md": b"hello\n", "app-main/run.sh": b"#!/bin/sh\n",
                    "app-main/.gitignore": b"*.log\n", "app-main/debug.log": b"noise\n",
                    "app-main/src/app.py": b"print(1)\n"})  # fmt: skip
    status, made = alice.form("/api/projects", {"name": "from tar"},
                              {"archive": ("app-main.tar.gz", data)})  # fmt: skip
    assert status == 201 and made["state"] == "ready", (status, made)
    conversation = _conversation(alice, made["id"])
    listing = "git ls-files -s | awk '{print $1, $4}'; ls -A"
    fresh.enqueue(tool_reply(("bash", {"command": listing})), text_reply("listed"))
    events = prompt_and_read(alice, conversation["id"], "what is here?")
    (result,) = [e for e in events if e["type"] == "tool_result"]
    output = json.loads(result["result"])["output"]
    assert "100755 run.sh" in output and "100644 src/app.py" in output, output
    assert "debug.log" not in output and "app-main" not in output, output
    hostile = _tar_gz({"ok.txt": b"fine\n"}, links={"out": "../../../etc"})
    status, refused = alice.form("/api/projects", {"name": "evil"},
                                 {"archive": ("evil.tar.gz", hostile)})  # fmt: skip
    assert (status, refused["error"]) == (400, "bad_archive"), refused
    assert "out" in refused["message"]
    status, refused = alice.form("/api/projects", {"name": "junk"},
                                 {"archive": ("junk.zip", b"not an archive at all")})  # fmt: skip
    assert (status, refused["error"]) == (400, "bad_archive"), refused
    after = {p["id"] for p in alice.call("GET", "/api/projects")[1]["projects"]}
    assert after - before == {made["id"]}  # nothing kept of the refused ones
