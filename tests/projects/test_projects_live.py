"""Projects' network half against a real root server: Daphne drops to the service user,
git runs as the owner's uid in their sandbox (a clone by their file host, the
``git_clone`` request; a push in a sandbox of the broker's, the ``git`` request), and the
relay in the server adds the owner's credential on the way to a loopback remote."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from agent.sandbox.git_spawn import RELAY_URLS
from testkit.api_client import Api
from testkit.git_server import GitServer, git
from testkit.live import LiveServer
from testkit.model_server import text_reply, tool_reply
from tests.conftest import require_bwrap
from tests.web.test_cli_agents_live import prompt_and_read

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)")
TOKEN = "live-tok-9c2e51d0a7b34f18"


@pytest.fixture(scope="module")
def remote():
    with GitServer(user="alice-git", token=TOKEN) as server:
        server.make_repository("app.git", {"app.py": "print('hi')\n"}, branch="trunk")
        yield server


@pytest.fixture(scope="module")
def live(tmp_path_factory, remote, model):
    require_bwrap()
    server = LiveServer(tmp_path_factory.mktemp("projects-net"),
                        HARNESS_EGRESS_ALLOW=remote.host, HARNESS_GIT_TIMEOUT="60",
                        ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=model.url,
                        HARNESS_RUNS_PER_MINUTE="1000")  # fmt: skip
    server.start()
    server.create_users("alice", "bob")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def alice(live):
    return Api(live.url, live.manage("create_api_token", "alice").strip())


@pytest.fixture(scope="module")
def bob(live):
    return Api(live.url, live.manage("create_api_token", "bob").strip())


def _user_id(live, name: str) -> int:
    code = f"from agent.models import User; print(User.objects.get(username={name!r}).pk)"
    return int(live.manage("shell", "-c", code).split()[-1])


def _settled(api: Api, project_id: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, shown = api.call("GET", f"/api/projects/{project_id}")
        assert status == 200
        if shown["state"] != "cloning":
            return shown
        time.sleep(0.1)
    raise AssertionError("the clone did not finish")


def test_bad_urls_are_refused_before_anything_runs(alice):
    for url in ("ssh://git@example.com/x.git", "file:///etc", "ext::sh -c id", "/srv/repo",
                "https://user:pw@example.com/x.git", "git://example.com/x"):  # fmt: skip
        status, answer = alice.call("POST", "/api/projects", {"name": "x", "git_url": url})
        assert (status, answer["error"]) == (400, "bad_url"), url


def test_clone_through_the_broker_then_push_and_its_refusals(live, alice, bob, remote):
    status, _ = alice.call("PUT", f"/api/credentials/git/{remote.host}",
                           {"username": "alice-git", "token": TOKEN})  # fmt: skip
    assert status == 204
    status, made = alice.call("POST", "/api/projects",
                              {"name": "app", "git_url": remote.url("app.git")})  # fmt: skip
    assert status == 201 and made["state"] == "cloning"
    shown = _settled(alice, made["id"])
    assert (shown["state"], shown["default_branch"]) == ("ready", "trunk"), shown
    assert bob.call("GET", f"/api/projects/{made['id']}")[0] == 404
    uid = 200_000 + _user_id(live, "alice")
    repo = (live.root / "workspaces" / str(_user_id(live, "alice")) / ".harness-projects"
            / made["id"].replace("-", "") / "repo.git")  # fmt: skip
    assert repo.stat().st_uid == uid  # written by the owner's sandbox, not the server
    # A conversation working on a branch of it (the worktree half sets these).
    conversation = alice.call("POST", "/api/conversations", {})[1]["id"]
    code = (
        "from agent.models import Conversation; Conversation.objects.filter(pk="
        f"{conversation!r}).update(project_id={made['id']!r}, branch='harness/1a2b3c4d')"
    )
    live.manage("shell", "-c", code)
    trunk = remote.head_of("app.git", "trunk")
    tree = git("--git-dir", str(repo), "rev-parse", f"{trunk}^{{tree}}").strip()
    commit = git("--git-dir", str(repo), "commit-tree", tree, "-p", trunk, "-m", "work").strip()
    git("--git-dir", str(repo), "update-ref", "refs/heads/harness/1a2b3c4d", commit)
    subprocess.run(["chown", "-R", f"{uid}:{uid}", str(repo)], check=True)
    assert bob.call("POST", f"/api/conversations/{conversation}/push")[0] == 404
    status, pushed = alice.call("POST", f"/api/conversations/{conversation}/push")
    assert status == 200, pushed
    assert pushed == {"remote": remote.url("app.git"), "branch": "harness/1a2b3c4d",
                      "commit": commit}  # fmt: skip
    assert remote.head_of("app.git", "harness/1a2b3c4d") == commit
    # The clone and the push are each a row of the Egress log, the push's naming its
    # conversation, with the bytes that went through the relay.
    code = (
        "from agent.models import EgressLog; print([(str(r.conversation_id), r.allowed, "
        "r.bytes_up > 0 < r.bytes_down) for r in EgressLog.objects.order_by('id')])"
    )
    logged = live.manage("shell", "-c", code).strip().splitlines()[-1]
    assert logged == repr([("None", True, True), (conversation, True, True)]), logged
    # Someone else moves the remote branch on: the push is not a fast-forward.
    remote.commit_on("app.git", "harness/1a2b3c4d", "theirs.txt", "theirs\n")
    status, refused = alice.call("POST", f"/api/conversations/{conversation}/push")
    assert (status, refused["error"]) == (409, "push_rejected"), refused
    # A credential the remote refuses: a remote error, with git's words and no token.
    alice.call("PUT", f"/api/credentials/git/{remote.host}",
               {"username": "alice-git", "token": "revoked-" + TOKEN})  # fmt: skip
    status, failed = alice.call("POST", f"/api/conversations/{conversation}/push")
    assert (status, failed["error"]) == (502, "remote_error"), failed
    assert "refused the credential" in failed["message"] and TOKEN not in failed["message"]


def test_a_failed_clone_by_the_file_host_says_why_and_keeps_nothing(live, alice, remote):
    """The file host runs the clone (no sandbox of its own): git's words come back with the
    remote's URL in place of the relay's loopback port, no token, and nothing half-made."""
    alice.call("PUT", f"/api/credentials/git/{remote.host}",
               {"username": "alice-git", "token": TOKEN})  # fmt: skip
    status, made = alice.call("POST", "/api/projects",
                              {"name": "gone", "git_url": remote.url("missing.git")})  # fmt: skip
    assert status == 201
    shown = _settled(alice, made["id"])
    assert shown["state"] == "failed", shown
    assert remote.url("missing.git") in shown["error"] and TOKEN not in shown["error"]
    assert not RELAY_URLS.search(shown["error"]), shown["error"]
    home = (live.root / "workspaces" / str(_user_id(live, "alice")) / ".harness-projects"
            / made["id"].replace("-", ""))  # fmt: skip
    assert not home.exists()
    # The host that ran it still serves its files.
    assert alice.call("GET", "/api/files/")[0] == 200


def test_a_clone_worked_on_by_the_agent_then_committed_and_pushed(live, alice, remote, fresh):
    """Both halves together: a clone through the relay, a conversation in its own worktree
    where the agent's bash changes files, the changes, a commit by the signed-in user and
    its push back to the remote."""
    remote.make_repository("site.git", {"index.html": "<h1>hi</h1>\n"}, branch="main")
    alice.call("PUT", f"/api/credentials/git/{remote.host}",
               {"username": "alice-git", "token": TOKEN})  # fmt: skip
    made = alice.call("POST", "/api/projects",
                      {"name": "site", "git_url": remote.url("site.git")})[1]  # fmt: skip
    assert _settled(alice, made["id"])["state"] == "ready"
    status, conversation = alice.call("POST", "/api/conversations", {"project": made["id"]})
    assert status == 201, conversation
    cid = conversation["id"]
    shown = alice.call("GET", f"/api/conversations/{cid}")[1]
    branch = shown["branch"]
    assert shown["project"] == made["id"]
    assert branch == f"harness/{cid.replace('-', '')[:8]}"
    command = "echo '<p>more</p>' >> index.html && echo new > notes.txt && git status --short"
    fresh.enqueue(tool_reply(("bash", {"command": command})), text_reply("edited"))
    events = prompt_and_read(alice, cid, "edit the page")
    (result,) = [e for e in events if e["type"] == "tool_result"]
    assert not result["isError"], result["result"]
    assert [e["files"] for e in events if e["type"] == "checkpoint"][-1] == [
        "index.html", "notes.txt"]  # fmt: skip
    changes = alice.call("GET", f"/api/conversations/{cid}/changes")[1]
    assert {(f["path"], f["status"]) for f in changes["files"]} == {
        ("index.html", "modified"), ("notes.txt", "added")}  # fmt: skip
    status, committed = alice.call("POST", f"/api/conversations/{cid}/commit",
                                   {"message": "More on the page"})  # fmt: skip
    assert status == 201, committed
    status, pushed = alice.call("POST", f"/api/conversations/{cid}/push")
    assert status == 200, pushed
    assert pushed["branch"] == branch and pushed["commit"] == committed["commit"]
    assert remote.head_of("site.git", branch) == committed["commit"]
    author = git("--git-dir", str(remote.root / "site.git"), "log", "-1", "--format=%an|%s",
                 committed["commit"]).strip()  # fmt: skip
    assert author == "alice|More on the page"


def _loopback_listeners(uid: int) -> dict[int, int]:
    """Port → the pid of a process of ``uid`` in whose network namespace something listens
    on 127.0.0.1 (read as root from each process's own /proc/<pid>/net/tcp)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
            if f"\nUid:\t{uid}\t" not in status:
                continue
            lines = Path(f"/proc/{entry}/net/tcp").read_text().splitlines()[1:]
        except OSError:  # it ended meanwhile
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, port = local.split(":")
            if state == "0A" and address == "0100007F":  # LISTEN on 127.0.0.1
                found[int(port, 16)] = int(entry)
    return found


def test_an_agents_bash_cannot_reach_a_running_clones_port(live, alice, remote, fresh):
    """The clone's forwarder listens on the file host's loopback while git runs; the
    agent's bash (its own network namespace) must not reach it, nor see it listed."""
    code = ("from agent.runs.workspaces import sandbox_ids; from agent.models import User; "
            "print(sandbox_ids(User.objects.get(username='alice').pk)[0])")  # fmt: skip
    uid = int(live.manage("shell", "-c", code).split()[-1])
    alice.call("PUT", f"/api/credentials/git/{remote.host}",
               {"username": "alice-git", "token": TOKEN})  # fmt: skip
    cid = alice.call("POST", "/api/conversations", {})[1]["id"]
    fresh.enqueue(tool_reply(("bash", {"command": "true"})), text_reply("ready"))
    # The bash sandbox and the file host, running.
    seen = max(e["seq"] for e in prompt_and_read(alice, cid, "warm up"))
    before = _loopback_listeners(uid)
    remote.hold.clear()  # the remote holds its answer: the clone stays running
    try:
        made = alice.call("POST", "/api/projects",
                          {"name": "held", "git_url": remote.url("app.git")})[1]  # fmt: skip
        deadline = time.monotonic() + 30
        while not (ports := set(listeners := _loopback_listeners(uid)) - set(before)):
            assert time.monotonic() < deadline, "the clone's forwarder never listened"
            time.sleep(0.05)
        (port,) = ports
        host = listeners[port]  # (the scan that found it: a second one could miss it)
        # The control: from the host's own namespace the port answers.
        reach = f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo OPEN || echo CLOSED"
        inside = subprocess.run(["nsenter", "-t", str(host), "-n", "bash", "-c", reach],
                                capture_output=True, text=True, timeout=10)  # fmt: skip
        assert inside.stdout.strip() == "OPEN", inside
        listed = f"grep -ci ':{port:04X} ' /proc/net/tcp /proc/net/tcp6 || true"
        fresh.enqueue(tool_reply(("bash", {"command": f"{reach}; {listed}"})), text_reply("x"))
        events = prompt_and_read(alice, cid, "try the clone's port", since=seen)
        (result,) = [e for e in events if e["type"] == "tool_result"]
        text = str(result["result"])
        assert "CLOSED" in text and "OPEN" not in text, text
        assert "/proc/net/tcp:0" in text and "/proc/net/tcp6:0" in text, text
    finally:
        remote.hold.set()
    assert _settled(alice, made["id"])["state"] == "ready"
