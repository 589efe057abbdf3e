"""A hostile agent against rewind: its bash writes what it likes in its own worktree and
in the project's repository (objects, refs), then the restore API is asked for a commit
of another project of the same owner. Without a broker (a root test process: the
one-shot sandbox runs the git work as the owner's uid and sees every project of theirs,
as the file host does), so the repository's objects and refs are the agent's to shape;
what the server recorded is not."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.core.cache import cache
from django.test import Client

from agent.core.tools.bash import BashTool
from agent.models import Conversation, User
from agent.runs import projects
from agent.runs.workspaces import conversation_workspace
from agent.web.api_tokens import create_token
from tests.conftest import require_bwrap

pytestmark = pytest.mark.django_db(transaction=True)

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


@pytest.fixture
def kim(settings, tmp_path):
    require_bwrap()
    cache.clear()
    settings.HARNESS_WORKSPACES = tmp_path / "workspaces"
    settings.HARNESS_CONVERSATIONS_PER_HOUR = 1000
    user = User.objects.create_user("kim", password="pw-kim-12345")
    yield user, Client(HTTP_AUTHORIZATION=f"Bearer {create_token(user)[1]}")
    cache.clear()


def _send(client: Client, method: str, url: str, body=None):
    data = json.dumps(body) if body is not None else None
    return getattr(client, method.lower())(url, data, content_type="application/json")


def _bash(conversation, command: str) -> str:
    result = asyncio.run(
        BashTool(conversation_workspace(conversation)).execute({"command": command})
    )
    assert not result.is_error, result.content
    return json.loads(result.content)["output"]


def _conversation(client: Client, name: str) -> Conversation:
    project = _send(client, "POST", "/api/projects", {"name": name}).json()
    made = _send(client, "POST", "/api/conversations", {"project": project["id"]})
    assert made.status_code == 201, made.json()
    return Conversation.objects.get(pk=made.json()["id"])


def test_a_restore_reads_no_other_project_through_borrowed_objects(kim):
    user, client = kim
    private = _conversation(client, "private")
    _bash(private, "echo 'the private plan' > plan.txt")
    known = projects.commit(private, "the plan", user)
    victim = f"/projects/{private.project_id.hex}/repo.git"
    mine = _conversation(client, "mine")
    # 1. A worktree's `.git` file naming the other project's worktree: the checkpoint's
    #    `git add` runs where no other project is (its sandbox shows this conversation
    #    alone), so no gitlink to that worktree's HEAD is recorded.
    _bash(mine, f"mkdir peek && echo 'gitdir: {victim}/worktrees/{private.id.hex}' > peek/.git")
    projects.checkpoint(mine)
    ref = f"refs/harness/checkpoints/{mine.id.hex}/head"
    recorded = _bash(mine, f"git ls-tree -r {ref}")
    assert known not in recorded and "commit" not in recorded, recorded
    leaked = known  # as if learnt some other way
    # 2. The repository would borrow the other's objects (the kernel refuses: objects/info
    #    is read-only), and the checkpoint ref (the agent's to move) gets that commit as an
    #    ancestor.
    borrowed = (f"tree {EMPTY_TREE}\\nparent {leaked}\\nauthor a <a@a> 0 +0000\\n"
                "committer a <a@a> 0 +0000\\n\\nx\\n")  # fmt: skip
    out = _bash(mine, f"""
        echo {victim}/objects 2>&1 >> "$(git rev-parse --git-common-dir)/objects/info/alternates"
        c=$(printf '{borrowed}' | git hash-object -t commit -w --stdin)
        git update-ref {ref} "$c" 2>/dev/null; true""")  # fmt: skip
    assert "Read-only file system" in out, out
    # 3. The restore API, asked for that commit by whoever drives the conversation.
    response = _send(client, "POST", f"/api/conversations/{mine.id}/restore",
                     {"checkpoint": leaked})  # fmt: skip
    shown = _bash(mine, "cat plan.txt 2>/dev/null; true")
    assert "the private plan" not in shown
    assert (response.status_code, response.json()["error"]) == (404, "not_found")


def test_a_conversation_sees_no_other_worktree_of_its_project(kim):
    user, client = kim
    first = _conversation(client, "shared")
    _bash(first, "echo first > a.txt")
    head = projects.commit(first, "the first one's work", user)
    made = _send(client, "POST", "/api/conversations", {"project": str(first.project_id)})
    second = Conversation.objects.get(pk=made.json()["id"])
    admin = f"/projects/{first.project_id.hex}/repo.git/worktrees/{first.id.hex}"
    # Its agent sees its own administrative directory alone...
    out = _bash(second, f"ls $(git rev-parse --git-common-dir)/worktrees; cat {admin}/HEAD 2>&1; "
                f"mkdir peek; echo 'gitdir: {admin}' > peek/.git; true")  # fmt: skip
    assert out.split()[0] == second.id.hex and "No such file" in out, out
    # ... and so does Harness's checkpoint: the `.git` file naming the other's records
    # no gitlink to its HEAD.
    projects.checkpoint(second)
    recorded = _bash(second, f"git ls-tree -r refs/harness/checkpoints/{second.id.hex}/head")
    assert head not in recorded and "commit" not in recorded, recorded
