"""Two routes from one project to another of the same owner, through a real root server:
the user's file host runs Harness's git and sees every project of theirs, so a file the
agent plants in its own repository must not make that git read or write another one.

(a) the worktree's administrative ``commondir`` names the repository git uses (its refs,
    objects, configuration); (b) ``objects/info/alternates`` lends another repository's
    objects, and ``objects`` itself, moved aside for a link, is another repository's."""

from __future__ import annotations

import hashlib
import os

import pytest

from testkit.live import LiveServer
from tests.conftest import require_bwrap
from tests.sandbox.test_projects_live import _api, _bash, _conversation

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)")


@pytest.fixture(scope="module")
def live(tmp_path_factory, model):
    require_bwrap()
    server = LiveServer(tmp_path_factory.mktemp("routes"), ANTHROPIC_API_KEY="test-key",
                        ANTHROPIC_BASE_URL=model.url,
                        HARNESS_RUNS_PER_MINUTE="1000")  # fmt: skip
    server.start()
    server.create_users("dana")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def dana(live):
    return _api(live, "dana")


def _project(api, name: str) -> str:
    status, made = api.call("POST", "/api/projects", {"name": name})
    assert status == 201, made
    return made["id"]


def _two(dana) -> tuple[dict, dict]:
    """The agent's conversation and the victim's: two projects of one owner."""
    victim = _conversation(dana, _project(dana, "victim"))
    mine = _conversation(dana, _project(dana, "mine"))
    return mine, victim


def _repo(conversation: dict) -> str:
    return f"/projects/{conversation['project'].replace('-', '')}/repo.git"


def test_the_worktrees_commondir_does_not_move_harness_git(dana, fresh):
    mine, victim = _two(dana)
    cid = mine["id"].replace("-", "")
    _, out = _bash(fresh, dana, mine, f"echo {_repo(victim)} > $(git rev-parse --git-dir)/commondir"
                   " 2>&1; echo planted > planted.txt")  # fmt: skip
    # The checkpoint after that call, and a commit.
    status, body = dana.call("POST", f"/api/conversations/{mine['id']}/commit", {"message": "m"})
    refs = f"refs/harness/checkpoints/{cid} refs/heads/harness/{cid[:8]}"
    _, seen = _bash(fresh, dana, victim, f"git for-each-ref --format='%(refname)' {refs}; echo end")
    assert seen.split() == ["end"], (out, seen)
    assert "Read-only file system" in out, out
    assert status == 201, body


def test_a_commondir_in_the_repository_does_not_move_harness_git(dana, fresh):
    """The repository itself is the agent's to write in: a ``commondir`` put there would
    send the refs of Harness's git on the repository (a new conversation's branch) to the
    one it names."""
    mine, victim = _two(dana)
    plant = f"echo {_repo(victim)} > $(git rev-parse --git-common-dir)/commondir"
    _, base = _bash(fresh, dana, mine, f"git rev-parse HEAD; {plant}")
    made = {"project": mine["project"], "base": base.strip()}
    status, body = dana.call("POST", "/api/conversations", made)
    _, seen = _bash(fresh, dana, victim, "git for-each-ref --format='%(refname)' refs/heads")
    assert seen.split() == ["refs/heads/" + victim["branch"], "refs/heads/main"], seen
    assert status >= 400 and "commondir" in body["message"], (status, body)


def test_alternates_and_a_moved_objects_directory_reach_no_other_project(dana, fresh):
    mine, victim = _two(dana)
    # The objects directory moved aside, a link to the other project's in its place: a
    # checkpoint would write this file's blob there.
    _, out = _bash(fresh, dana, mine, f"""cd $(git rev-parse --git-common-dir)
        mv objects objects.moved 2>&1 && ln -s {_repo(victim)}/objects objects || echo refused
        cd /workspace
        echo 'a unique secret 41c7' > unique.txt""")  # fmt: skip
    content = b"a unique secret 41c7\n"
    blob = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
    status, body = dana.call("GET", f"/api/conversations/{mine['id']}/changes")
    _, seen = _bash(fresh, dana, victim, f"git cat-file -e {blob} 2>&1 && echo leaked; echo end")
    assert "leaked" not in seen, seen
    assert status == 200 and [f["path"] for f in body["files"]] == ["unique.txt"], body
    assert "refused" in out, out
    # Alternates: refused by the kernel (objects/info is read-only).
    alternates = "$(git rev-parse --git-common-dir)/objects/info/alternates"
    _, out = _bash(
        fresh, dana, mine, f"echo {_repo(victim)}/objects >> {alternates} 2>&1; echo end"
    )
    assert "Read-only file system" in out, out


def test_a_repository_with_alternates_is_refused(live, dana, fresh):
    """Harness never makes ``objects/info/alternates``: one there (written before the
    binds, or by anything else) stops the operation rather than reading through it."""
    mine, victim = _two(dana)
    home = live.root / "workspaces"
    found = list(home.rglob(f"{mine['project'].replace('-', '')}/repo.git"))
    assert len(found) == 1, found
    (found[0] / "objects" / "info" / "alternates").write_text(f"{_repo(victim)}/objects\n")
    status, body = dana.call("GET", f"/api/conversations/{mine['id']}/changes")
    assert status >= 400 and "alternates" in body["message"], (status, body)


def test_a_link_in_the_refs_writes_no_ref_into_another_project(dana, fresh):
    """The checkpoint ref's directory swapped for a link to the other project's branches:
    the checkpoint after the call would create a branch there (naming an object it lacks).
    Refused by a check before each operation (a race remains: SECURITY.md)."""
    mine, victim = _two(dana)
    cid = mine["id"].replace("-", "")
    at = "$(git rev-parse --git-common-dir)/refs/harness/checkpoints"
    link = f"cd {at} && rm -rf {cid} && ln -s {_repo(victim)}/refs/heads {cid} && echo linked"
    _, out = _bash(fresh, dana, mine, f"{link}; echo x > /workspace/x")
    assert "linked" in out, out
    _, seen = _bash(fresh, dana, victim, "git for-each-ref --format='%(refname)' refs/heads")
    assert seen.split() == ["refs/heads/" + victim["branch"], "refs/heads/main"], seen
    status, body = dana.call("GET", f"/api/conversations/{mine['id']}/changes")
    assert status >= 400 and "link in the repository" in body["message"], (status, body)
