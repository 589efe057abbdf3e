"""Clone and push through the product's path: git in the owner's sandbox, the relay adding
the owner's credential, a real smart-HTTP remote with Basic auth on loopback."""

from __future__ import annotations

import subprocess

import pytest
from asgiref.sync import sync_to_async

from agent.models import Project, User
from agent.runs import git_credentials, git_remote
from agent.runs.workspaces import workspace_path
from agent.sandbox.git_spawn import project_repository
from tests.projects.conftest import TOKEN

pytestmark = pytest.mark.django_db(transaction=True)


def _project(user, url: str, branch: str = "") -> Project:
    return Project.objects.create(owner=user, name="demo", git_url=url, default_branch=branch)


def _repository(project: Project):
    return workspace_path(project.owner_id) / project_repository(project.id)


async def test_a_clone_with_the_owners_credential_is_ready_with_its_default_branch(net, remote):
    ada = await User.objects.acreate(username="ada")
    await sync_to_async(git_credentials.store)(ada, remote.host, "ada-git", TOKEN)
    project = await sync_to_async(_project)(ada, remote.url("demo.git"))
    await git_remote.clone_project(project.id)
    await project.arefresh_from_db()
    assert (project.state, project.default_branch, project.error) == ("ready", "main", "")
    repo = _repository(project)
    listed = subprocess.run(["git", "--git-dir", str(repo), "ls-tree", "-r", "--name-only",
                             "main"], capture_output=True, text=True)  # fmt: skip
    assert listed.stdout.split() == ["README.md", "src/app.py"]
    assert not repo.with_name(repo.name + ".partial").exists()
    config = (repo / "config").read_text()
    assert remote.url("demo.git") in config and TOKEN not in config
    assert remote.requests[-1].authorization.startswith("Basic ")


async def _cloned(ada, remote, **fields) -> Project:
    project = await sync_to_async(_project)(ada, remote.url("demo.git"), **fields)
    await git_remote.clone_project(project.id)
    await project.arefresh_from_db()
    return project


async def test_the_clone_runs_as_the_owners_sandbox_uid(net, remote):
    import os

    ada = await User.objects.acreate(username="ada")
    await sync_to_async(git_credentials.store)(ada, remote.host, "ada-git", TOKEN)
    project = await _cloned(ada, remote)
    if os.geteuid() == 0:
        assert _repository(project).stat().st_uid == net.HARNESS_SANDBOX_UID_BASE + ada.pk


async def test_a_public_remote_clones_without_a_credential_and_none_is_sent(net, remote):
    remote.public = True
    ada = await User.objects.acreate(username="ada")
    project = await _cloned(ada, remote, branch="main")
    assert project.state == "ready" and project.default_branch == "main"
    assert all(seen.authorization is None for seen in remote.requests)


async def test_without_a_credential_the_failure_says_how_to_add_one(net, remote):
    ada = await User.objects.acreate(username="ada")
    project = await _cloned(ada, remote)
    assert project.state == "failed"
    assert f"PUT /api/credentials/git/{remote.host}" in project.error
    assert "127.0.0.1:47012" not in project.error  # the remote's URL, not the relay's
    assert not _repository(project).exists()
    assert not _repository(project).with_name(_repository(project).name + ".partial").exists()


async def test_a_refused_credential_fails_with_gits_message_and_no_token(net, remote):
    ada = await User.objects.acreate(username="ada")
    await sync_to_async(git_credentials.store)(ada, remote.host, "ada-git", "wrong-" + TOKEN)
    project = await _cloned(ada, remote)
    assert project.state == "failed"
    assert "refused the credential of 'ada-git'" in project.error
    assert "fatal:" in project.error  # git's own words
    assert TOKEN not in project.error and "wrong-" not in project.error


async def test_an_endless_remote_ends_with_a_clear_error_and_nothing_kept(net, remote):
    net.HARNESS_GIT_MAX_MB = 2
    remote.endless = True
    ada = await User.objects.acreate(username="ada")
    await sync_to_async(git_credentials.store)(ada, remote.host, "ada-git", TOKEN)
    project = await _cloned(ada, remote)
    assert project.state == "failed"
    assert "more than 2 MB" in project.error
    projects = _repository(project).parent.parent
    assert list(projects.iterdir()) == []


async def test_a_loopback_remote_without_an_allow_rule_is_refused(net, remote):
    net.HARNESS_EGRESS_ALLOW = []
    ada = await User.objects.acreate(username="ada")
    await sync_to_async(git_credentials.store)(ada, remote.host, "ada-git", TOKEN)
    project = await _cloned(ada, remote)
    assert project.state == "failed"
    assert "loopback" in project.error and "HARNESS_EGRESS_ALLOW" in project.error
    assert remote.requests == []


def _commit_in(repo, branch: str, parent: str, path: str, text: str, uid: int) -> str:
    """A commit on ``branch`` of the bare repository (what a conversation commits)."""
    import os

    from testkit.git_server import git

    blob = subprocess.run(["git", "--git-dir", str(repo), "hash-object", "-w", "--stdin"],
                          input=text, capture_output=True, text=True).stdout.strip()  # fmt: skip
    tree = subprocess.run(["git", "--git-dir", str(repo), "mktree"],
                          input=f"100644 blob {blob}\t{path}\n", capture_output=True,
                          text=True).stdout.strip()  # fmt: skip
    commit = git("--git-dir", str(repo), "commit-tree", tree, "-p", parent, "-m", "work").strip()
    git("--git-dir", str(repo), "update-ref", f"refs/heads/{branch}", commit)
    if os.geteuid() == 0:
        for where, dirs, files in os.walk(repo):
            for name in dirs + files:
                os.lchown(os.path.join(where, name), uid, uid)
    return commit


async def test_a_push_lands_on_the_remote_and_a_stale_one_is_rejected(net, remote):
    ada = await User.objects.acreate(username="ada")
    await sync_to_async(git_credentials.store)(ada, remote.host, "ada-git", TOKEN)
    project = await _cloned(ada, remote)
    repo, uid = _repository(project), net.HARNESS_SANDBOX_UID_BASE + ada.pk
    main = remote.head_of("demo.git", "main")
    mine = _commit_in(repo, "harness/0a1b2c3d", main, "notes.txt", "mine\n", uid)
    pushed = await git_remote.push(project, "harness/0a1b2c3d")
    assert pushed == git_remote.Pushed(remote.url("demo.git"), "harness/0a1b2c3d", mine)
    assert remote.head_of("demo.git", "harness/0a1b2c3d") == mine
    remote.commit_on("demo.git", "main", "other.txt", "someone else's\n")
    _commit_in(repo, "main", main, "notes.txt", "diverged\n", uid)
    with pytest.raises(git_remote.GitFailed) as failed:
        await git_remote.push(project, "main")
    assert failed.value.rejected and "rejected" in failed.value.message
    assert TOKEN not in failed.value.message


async def test_a_push_with_a_refused_credential_is_a_remote_error(net, remote):
    ada = await User.objects.acreate(username="ada")
    await sync_to_async(git_credentials.store)(ada, remote.host, "ada-git", TOKEN)
    project = await _cloned(ada, remote)
    await sync_to_async(git_credentials.store)(ada, remote.host, "ada-git", "revoked")
    with pytest.raises(git_remote.GitFailed) as failed:
        await git_remote.push(project, "main")
    assert not failed.value.rejected and "refused the credential" in failed.value.message


async def test_the_credential_is_nowhere_a_sandboxed_process_can_read(net, remote):
    """Mid-clone (the remote holds its pack back), every process of the owner's uid is
    read from outside: environment, arguments; then every file of the workspace."""
    import asyncio
    import os
    from base64 import b64encode
    from pathlib import Path

    if os.geteuid() != 0:
        pytest.skip("needs root: the sandbox's processes are another uid's")
    ada = await User.objects.acreate(username="ada")
    await sync_to_async(git_credentials.store)(ada, remote.host, "ada-git", TOKEN)
    project = await sync_to_async(_project)(ada, remote.url("demo.git"))
    uid = net.HARNESS_SANDBOX_UID_BASE + ada.pk
    secrets = [TOKEN.encode(), b64encode(f"ada-git:{TOKEN}".encode())]
    remote.hold.clear()
    cloning = asyncio.ensure_future(git_remote.clone_project(project.id))
    try:
        assert await asyncio.to_thread(remote.held.wait, 30)
        seen = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.stat(f"/proc/{pid}").st_uid != uid:
                    continue
                blobs = [Path(f"/proc/{pid}/{n}").read_bytes() for n in ("environ", "cmdline")]
            except OSError:
                continue
            seen += 1
            assert not any(s in blob for s in secrets for blob in blobs)
        assert seen >= 2  # the forwarder and git at least
        for where, _, files in os.walk(workspace_path(ada.pk)):
            for name in files:
                data = Path(where, name).read_bytes()
                assert not any(s in data for s in secrets), name
    finally:
        remote.hold.set()
        await cloning
    await project.arefresh_from_db()
    assert project.state == "ready"
    assert TOKEN not in (_repository(project) / "config").read_text()


async def test_a_planted_configuration_runs_nothing_during_a_push(net, remote):
    """What an agent can write into the repository's config and hooks (it shares them
    with the worktrees): hooks, a hooks path, fsmonitor, a credential helper, an askpass,
    an ssh command, a URL rewrite to another protocol. The push runs none of it."""
    import os

    ada = await User.objects.acreate(username="ada")
    await sync_to_async(git_credentials.store)(ada, remote.host, "ada-git", TOKEN)
    project = await _cloned(ada, remote)
    repo, uid = _repository(project), net.HARNESS_SANDBOX_UID_BASE + ada.pk
    marker = "/workspace/ran"
    planted = f"#!/bin/sh\necho planted > {marker}\n"
    (repo / "hooks").mkdir(exist_ok=True)
    for hook in ("pre-push", "post-update", "reference-transaction", "push-to-checkout"):
        (repo / "hooks" / hook).write_text(planted)
        (repo / "hooks" / hook).chmod(0o755)
    (repo / "evil.sh").write_text(planted)
    (repo / "evil.sh").chmod(0o755)
    with (repo / "config").open("a") as config:
        config.write(
            "[core]\n\thooksPath = hooks\n\tfsmonitor = /workspace/" + _repository(project)
            .relative_to(workspace_path(ada.pk)).as_posix() + "/evil.sh\n"
            "\taskPass = /workspace/evil.sh\n\tsshCommand = /workspace/evil.sh\n"
            "[credential]\n\thelper = !/workspace/evil.sh\n"
            '[url "ext::/workspace/evil.sh "]\n\tinsteadOf = http://\n'
        )  # fmt: skip
    main = remote.head_of("demo.git", "main")
    _commit_in(repo, "harness/feedbeef", main, "x.txt", "x\n", uid)
    (repo / "evil.sh").write_text(planted.replace("/workspace/ran", f"/workspace/{repo.name}.ran"))
    if os.geteuid() == 0:
        os.chown(repo / "config", uid, uid)
    pushed = await git_remote.push(project, "harness/feedbeef")
    assert pushed.commit
    assert not (workspace_path(ada.pk) / "ran").exists()
    assert not list(workspace_path(ada.pk).rglob("*.ran"))


@pytest.mark.parametrize("host", ["0x7f000001", "2130706433", "0177.0.0.1", "127.1",
                                  "[::ffff:127.0.0.1]", "localhost"])  # fmt: skip
async def test_loopback_in_any_spelling_is_refused_without_a_rule(net, remote, host):
    net.HARNESS_EGRESS_ALLOW = []
    ada = await User.objects.acreate(username="ada")
    url = f"http://{host}:{remote.port}/demo.git"
    assert git_remote.url_problem(url) is None
    project = await sync_to_async(Project.objects.create)(owner=ada, name="x", git_url=url)
    await git_remote.clone_project(project.id)
    await project.arefresh_from_db()
    assert project.state == "failed" and "loopback" in project.error, project.error
    assert remote.requests == []


async def test_a_push_over_the_byte_bound_is_cut_with_a_clear_error(net, remote):
    import os

    ada = await User.objects.acreate(username="ada")
    await sync_to_async(git_credentials.store)(ada, remote.host, "ada-git", TOKEN)
    project = await _cloned(ada, remote)
    net.HARNESS_GIT_MAX_MB = 1
    repo, uid = _repository(project), net.HARNESS_SANDBOX_UID_BASE + ada.pk
    noise = os.urandom(3 * 1024 * 1024).hex()  # incompressible
    main = remote.head_of("demo.git", "main")
    _commit_in(repo, "harness/b16b00b5", main, "big.txt", noise, uid)
    with pytest.raises(git_remote.GitFailed) as failed:
        await git_remote.push(project, "harness/b16b00b5")
    assert "git sent more than 1 MB" in failed.value.message
    with pytest.raises(RuntimeError):
        remote.head_of("demo.git", "harness/b16b00b5")
