"""testkit's git remote: real git clones and pushes over smart HTTP with Basic auth."""

from __future__ import annotations

import base64
import subprocess

import pytest

from testkit.git_server import GIT_ENV, GitServer, git


@pytest.fixture
def remote():
    with GitServer(user="alice", token="s3cret-token") as server:
        server.make_repository("demo.git", {"README.md": "hello\n"})
        yield server


def _with_auth(remote: GitServer, user: str, token: str) -> list[str]:
    basic = base64.b64encode(f"{user}:{token}".encode()).decode()
    return ["-c", f"http.extraHeader=Authorization: Basic {basic}"]


def _git(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, env={**GIT_ENV, "GIT_TERMINAL_PROMPT": "0"},
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_a_clone_needs_the_right_credential(remote, tmp_path):
    refused = _git("clone", remote.url("demo.git"), str(tmp_path / "none"))
    assert refused.returncode != 0 and "could not read Username" in refused.stderr
    wrong = _git(*_with_auth(remote, "alice", "wrong"), "clone", remote.url("demo.git"),
                 str(tmp_path / "wrong"))  # fmt: skip
    assert wrong.returncode != 0 and "YWxpY2U6d3Jvbmc=" in remote.requests[-1].authorization
    good = _git(*_with_auth(remote, "alice", "s3cret-token"), "clone", remote.url("demo.git"),
                str(tmp_path / "good"))  # fmt: skip
    assert good.returncode == 0, good.stderr
    assert (tmp_path / "good" / "README.md").read_text() == "hello\n"
    assert [r.authorization for r in remote.requests][0] is None


def test_a_push_lands_and_a_stale_one_is_refused(remote, tmp_path):
    auth = _with_auth(remote, "alice", "s3cret-token")
    work = tmp_path / "work"
    assert _git(*auth, "clone", remote.url("demo.git"), str(work)).returncode == 0
    (work / "new.txt").write_text("new\n")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "new", cwd=work)
    pushed = _git(*auth, "push", "origin", "main", cwd=work)
    assert pushed.returncode == 0, pushed.stderr
    assert remote.head_of("demo.git", "main") == git("rev-parse", "HEAD", cwd=work).strip()
    remote.commit_on("demo.git", "main", "other.txt", "someone else\n")
    (work / "mine.txt").write_text("mine\n")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "mine", cwd=work)
    stale = _git(*auth, "push", "origin", "main", cwd=work)
    assert stale.returncode != 0 and "rejected" in stale.stderr
