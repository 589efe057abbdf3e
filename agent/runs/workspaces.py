"""Per-user workspaces under HARNESS_WORKSPACES.

One workspace per user, not per conversation: it is "that person's own workspace", the
way a developer keeps one checkout across many chats; files the agent made yesterday are
there today, in any conversation. Directory names are the user's numeric id, never a
user-chosen string.

When the server runs as root, each user's workspace belongs to a uid of that user's own
(``HARNESS_SANDBOX_UID_BASE`` + user id): the bash sandbox runs as it and the file tools
act with it (``setfsuid``), so the kernel keeps one user's processes, process limit
(RLIMIT_NPROC counts per uid) and files apart from another's, and from the server's.
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path

from django.conf import settings

from agent.core.projects import PROJECTS_DIR
from agent.core.tools import Workspace
from agent.sandbox import drop, project_mounts
from agent.sandbox.workspaces import prepare


def workspace_path(user_id: int) -> Path:
    return Path(settings.HARNESS_WORKSPACES) / str(int(user_id))


def sandbox_ids(user_id: int) -> tuple[int, int] | None:
    """The (uid, gid) a root server gives this user's workspace and sandbox; None when the
    server is not root (it cannot give files away, and the sandbox runs as the server)."""
    if os.geteuid() != 0:
        return None
    uid = settings.HARNESS_SANDBOX_UID_BASE + int(user_id)
    return uid, uid


def workspace_for(user_id: int) -> Workspace:
    """The user's workspace, created on first use. Blocking: call it from a thread."""
    client = drop.broker()
    if client is not None:
        # The server has dropped root: the broker makes it, and everything in it goes
        # through the user's own sandbox.
        reply, _ = client.request("workspace", user=int(user_id))
        workspace = Workspace(workspace_path(user_id))
        workspace.quota_mb = reply.get("quota_mb")
        workspace.sandbox = client.sandbox(int(user_id))
        workspace.sandbox.ensure_host()  # it hides the CLI homes before any sandbox runs
        return workspace
    path = workspace_path(user_id)
    ids = sandbox_ids(user_id)
    if ids is not None:
        quota_mb = prepare(Path(settings.HARNESS_WORKSPACES), user_id, ids)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        quota_mb = None
        with _opened(path) as fd:
            project_mounts.ensure_dir(fd, None)
    workspace = Workspace(path)
    workspace.quota_mb = quota_mb  # the bash tool names it when a command fills the disk
    workspace.hidden = (PROJECTS_DIR,)
    workspace.sandbox_binds = tuple(project_mounts.hidden())
    return workspace


def conversation_workspace(conversation, base: Workspace | None = None) -> Workspace:
    """Where a conversation's tools, bash, CLI and Files panel work: its worktree when it
    is in a project (docs/API.md, "Projects"), else its owner's workspace (``base``, when
    the caller has it already). Blocking."""
    base = base or workspace_for(conversation.owner_id)
    if not conversation.project_id or not conversation.branch:
        return _of_conversation(base, conversation)
    project, mine = conversation.project_id.hex, conversation.id.hex
    if base.sandbox is not None:
        # The server cannot enter the workspace: every call names the worktree to the
        # user's sandbox, which alone reaches it.
        workspace = Workspace(base.root)
        workspace.sandbox = base.sandbox.worktree(project, mine)
    else:
        projects = base.root / PROJECTS_DIR
        workspace = Workspace(projects / project / "trees" / mine)
        workspace.sandbox_binds = tuple(project_mounts.path_binds(str(projects), project, mine))
    workspace.quota_mb = base.quota_mb
    return _of_conversation(workspace, conversation)


def _of_conversation(workspace: Workspace, conversation) -> Workspace:
    """Its network policy, and where bash's background jobs run: the conversation's
    terminal sandbox (agent/runs/background.py), when this server has tmux for it."""
    from agent.core.cli_agents.tmux import tmux_path
    from agent.runs.background import ConversationJobs

    if tmux_path() is not None:
        workspace.background = ConversationJobs(conversation.id, conversation.owner_id)
    return with_egress(workspace, conversation)


def with_egress(workspace: Workspace, conversation) -> Workspace:
    """With ``HARNESS_EGRESS=proxy``, the conversation's sandboxes reach the network through
    its own socket of the egress proxy (agent/runs/egress.py)."""
    from agent.runs import egress

    if egress.enabled():
        workspace.egress = functools.partial(egress.socket_for, conversation.owner_id,
                                             conversation.id)  # fmt: skip
    return workspace


@contextlib.contextmanager
def _opened(path: Path):
    fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)
