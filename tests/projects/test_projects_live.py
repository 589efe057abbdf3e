"""Projects' network half against a real root server: Daphne drops to the service user,
its broker runs git as the owner's uid in their sandbox (the ``git`` request), and the
relay in the server adds the owner's credential on the way to a loopback remote."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from testkit.api_client import Api
from testkit.git_server import GitServer, git
from testkit.live import LiveServer
from tests.conftest import require_bwrap

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)")
TOKEN = "live-tok-9c2e51d0a7b34f18"


@pytest.fixture(scope="module")
def remote():
    with GitServer(user="alice-git", token=TOKEN) as server:
        server.make_repository("app.git", {"app.py": "print('hi')\n"}, branch="trunk")
        yield server


@pytest.fixture(scope="module")
def live(tmp_path_factory, remote):
    require_bwrap()
    server = LiveServer(tmp_path_factory.mktemp("projects-net"),
                        HARNESS_EGRESS_ALLOW=remote.host, HARNESS_GIT_TIMEOUT="60")  # fmt: skip
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
