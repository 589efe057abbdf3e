"""A hostile agent against push: its bash writes the project's repository (objects, refs),
so it can make the repository borrow another project's objects (``objects/info/
alternates``) and put one of that project's commits under its branch. The push then must
not carry the other project's history to this project's remote."""

from __future__ import annotations

import contextlib
import os
import subprocess

import pytest
from asgiref.sync import sync_to_async

from agent.models import Project, User
from agent.runs import git_credentials, git_remote
from agent.runs.workspaces import workspace_path
from agent.sandbox.git_spawn import project_repository
from tests.projects.conftest import TOKEN
from tests.projects.test_clone_push import _commit_in

pytestmark = pytest.mark.django_db(transaction=True)


def _git(repo, *args: str, stdin: str = "") -> str:
    done = subprocess.run(["git", "--git-dir", str(repo), *args], input=stdin,
                          capture_output=True, text=True, check=True)  # fmt: skip
    return done.stdout.strip()


async def test_a_push_carries_no_other_projects_objects(net, remote):
    ada = await User.objects.acreate(username="ada")
    await sync_to_async(git_credentials.store)(ada, remote.host, "ada-git", TOKEN)
    uid = net.HARNESS_SANDBOX_UID_BASE + ada.pk
    public = await Project.objects.acreate(owner=ada, name="public", git_url=remote.url("demo.git"))
    await git_remote.clone_project(public.id)
    other = await Project.objects.acreate(owner=ada, name="private", git_url=remote.url("demo.git"))
    await git_remote.clone_project(other.id)
    repo = workspace_path(ada.pk) / project_repository(public.id)
    secret_repo = workspace_path(ada.pk) / project_repository(other.id)
    main = remote.head_of("demo.git", "main")
    secret = _commit_in(secret_repo, "main", main, "plan.txt", "the private plan\n", uid)
    assert await sync_to_async(remote.head_of)("demo.git", "main") != secret
    # What the agent writes from bash: the borrowed objects (by the path git sees in the
    # push's sandbox, and relative to this repository's objects), and its branch on top.
    borrowed = f"/workspace/{project_repository(other.id)}/objects"
    (repo / "objects" / "info" / "alternates").write_text(
        f"{borrowed}\n../../../{other.id.hex}/repo.git/objects\n"
    )
    tree = _git(repo, "rev-parse", f"{main}^{{tree}}")
    on_top = _git(repo, "commit-tree", tree, "-p", secret, "-m", "innocent")
    _git(repo, "update-ref", "refs/heads/harness/feedbeef", on_top)
    for where, dirs, files in os.walk(repo):
        for name in dirs + files:
            os.lchown(os.path.join(where, name), uid, uid)
    with contextlib.suppress(git_remote.GitFailed):  # refused: fine, if nothing left
        await git_remote.push(public, "harness/feedbeef")
    remote_repo = remote.root / "demo.git"
    found = subprocess.run(["git", "--git-dir", str(remote_repo), "cat-file", "-e", secret],
                           capture_output=True)  # fmt: skip
    assert found.returncode != 0, "the other project's commit reached this project's remote"
