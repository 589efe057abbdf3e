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
