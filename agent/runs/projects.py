"""Projects and their conversations' worktrees, for the API (docs/API.md, "Projects"): the
database rows here, the git work in the owner's sandbox (agent/sandbox/projects.py runs
agent/core/projects/ops.py there). Blocking: call from a thread."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from django.conf import settings
from django.db import transaction

from agent.core.projects.layout import PROJECTS_DIR
from agent.core.tools.workspace import Workspace
from agent.models import Conversation, Project, User
from agent.runs.workspaces import sandbox_ids, workspace_for
from agent.sandbox import archive_ops
from agent.sandbox import projects as sandboxed

log = logging.getLogger(__name__)

MAX_PROJECTS = 50  # a user's projects (each holds a repository in their quota)
CLONES_AT_ONCE = 3  # per user: each holds a sandbox, a relay and the remote's bandwidth


class TooMany(Exception):
    pass


class TooManyClones(Exception):
    pass


def reserve(owner, **fields) -> Project:
    """A new project row (``cloning``), within the owner's bounds: at most ``MAX_PROJECTS``
    projects, and ``CLONES_AT_ONCE`` clones when it has a ``git_url``. The owner's row is
    locked while counting, so requests sent together are counted one after another
    (PostgreSQL runs them at once, and each would see the count before any insert)."""
    with transaction.atomic():
        list(User.objects.select_for_update(no_key=True).filter(pk=owner.pk).values_list("pk"))
        mine = Project.objects.filter(owner=owner)
        if mine.count() >= MAX_PROJECTS:
            raise TooMany(f"You have {MAX_PROJECTS} projects already; delete one first.")
        cloning = mine.filter(state=Project.State.CLONING).exclude(git_url="")
        if fields.get("git_url") and cloning.count() >= CLONES_AT_ONCE:
            raise TooManyClones(f"At most {CLONES_AT_ONCE} clones run at once.")
        return Project.objects.create(owner=owner, state=Project.State.CLONING, **fields)


def run_op(owner_id: int, name: str, args: dict) -> tuple[dict, bytes]:
    """A project operation as the owner, in the owner's sandbox: the seam every git
    command on a user's repositories goes through."""
    base = workspace_for(owner_id)
    return sandboxed.run(base.sandbox, str(base.root), sandbox_ids(owner_id), name, args)


def git(owner_id: int, project, args: list[str], *, conversation=None,
        network: bool = False, timeout: float = 60) -> dict:  # fmt: skip
    """One hardened git command line on a project's repository (in a conversation's
    worktree when one is named), as the owner, in the owner's sandbox: ``{"code", "out",
    "err"}``. ``network``: http(s) transports allowed (clone, fetch, push go here)."""
    named = {"project": _hex(project), "args": list(args), "network": network,
             "timeout": timeout}  # fmt: skip
    if conversation is not None:
        named["conversation"] = _hex(conversation)
    done, _ = run_op(owner_id, "git", named)
    return done


def _hex(value) -> str:
    return getattr(value, "hex", None) or str(value).replace("-", "")


def create_empty(owner, name: str) -> Project:
    """A project with an empty repository and one initial commit, ``ready``."""
    project = reserve(owner, name=name)
    try:
        made, _ = run_op(owner.pk, "create", {"project": project.id.hex})
    except Exception:
        project.delete()
        raise
    project.default_branch = made["default_branch"]
    project.state = Project.State.READY
    project.save(update_fields=["default_branch", "state", "updated"])
    return project


def create_from_archive(owner, name: str, upload, size: int) -> Project:
    """A project whose first commit is an uploaded ``.zip``/``.tar.gz`` (``upload``: a
    seekable file of ``size`` bytes), ``ready``. The archive is unpacked by the owner in
    their sandbox, checked whole first (agent/core/archives.py): ``ArchiveError`` when it is
    refused, and then nothing of it, nor the project, is kept."""
    project = reserve(owner, name=name)
    named = {"project": project.id.hex}
    made = None
    try:
        run_op(owner.pk, "prepare", named)
        made = True
        base = workspace_for(owner.pk)
        quota = (base.quota_mb or settings.HARNESS_WORKSPACE_QUOTA_MB) * 1024 * 1024
        limits = {"max_bytes": quota, "max_entries": archive_ops.MAX_ENTRIES}
        if base.sandbox is not None:  # the host, its view rooted at the project's directory
            home = base.sandbox.project_home(project.id.hex)
            archive_ops.unpack_in_host(home, upload, "import", limits, max(size, 1))
        else:  # a server without a broker may open the user's directories itself
            with contextlib.closing(
                Workspace(Path(base.root) / PROJECTS_DIR / project.id.hex)
            ) as home:
                archive_ops.unpack_upload(home, upload, "import", limits, max(size, 1))
        done, _ = run_op(owner.pk, "create_from_import", named)
    except BaseException:
        if made:
            with contextlib.suppress(Exception):
                run_op(owner.pk, "delete", named)
        project.delete()
        raise
    project.default_branch = done["default_branch"]
    project.state = Project.State.READY
    project.save(update_fields=["default_branch", "state", "updated"])
    return project


def delete(project: Project) -> None:
    """The repository and every worktree gone; the conversations keep their transcripts
    (and now work in their owner's own workspace)."""
    Conversation.objects.filter(project=project).update(branch="", base_commit="")
    run_op(project.owner_id, "delete", {"project": project.id.hex})
    project.delete()


def _args(conversation: Conversation, **more) -> dict:
    return {"project": conversation.project_id.hex, "conversation": conversation.id.hex, **more}


def add_worktree(conversation: Conversation, base: str) -> None:
    made, _ = run_op(conversation.owner_id, "add_worktree", _args(conversation, base=base))
    conversation.branch, conversation.base_commit = made["branch"], made["base_commit"]
    conversation.save(update_fields=["branch", "base_commit"])


def remove_worktree(conversation: Conversation) -> None:
    """A deleted conversation's worktree gone (its branch and commits stay). Best effort:
    a failure is logged, the conversation is deleted anyway."""
    if not in_project(conversation):
        return
    try:
        run_op(conversation.owner_id, "remove_worktree", _args(conversation))
    except Exception as exc:  # noqa: BLE001 - the files stay in the owner's quota; said
        log.warning("worktree of deleted conversation %s not removed: %s", conversation.id, exc)


def in_project(conversation: Conversation) -> bool:
    return bool(conversation.project_id and conversation.branch and conversation.base_commit)


def checkpoint(conversation: Conversation) -> dict | None:
    """The worktree recorded: ``{"id", "files"}``, or None when unchanged."""
    done, _ = run_op(conversation.owner_id, "checkpoint",
                     _args(conversation, base=conversation.base_commit))  # fmt: skip
    return done.get("checkpoint")


def restore(conversation: Conversation, target: str) -> dict:
    done, _ = run_op(conversation.owner_id, "restore",
                     _args(conversation, base=conversation.base_commit, target=target))  # fmt: skip
    return done


def changes(conversation: Conversation) -> dict:
    done, _ = run_op(conversation.owner_id, "changes",
                     _args(conversation, base=conversation.base_commit))  # fmt: skip
    return done


def commit(conversation: Conversation, message: str, user) -> str:
    name = user.get_full_name().strip() or user.get_username()
    email = user.email or f"{user.get_username()}@users.harness.invalid"
    done, _ = run_op(conversation.owner_id, "commit",
                     _args(conversation, message=message, name=name, email=email))  # fmt: skip
    return done["commit"]


def archive(conversation: Conversation) -> bytes:
    _, data = run_op(conversation.owner_id, "archive", _args(conversation))
    return data
