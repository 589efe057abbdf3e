"""Harness's git on one project's own repository, and on nothing else the owner's file
host can see (every project of theirs is there).

The agent writes in its repository from bash, and git follows names written there:
``objects/info/alternates`` (another repository's objects lent to this one), a
``commondir`` file (in the worktree's administrative directory, or one put in the
repository itself: the repository git then uses, its refs included), a link where
``objects`` was. The agents' sandboxes make those read-only or unmovable (kernel-enforced,
agent/sandbox/project_mounts.py); ``Git`` pins the common and object directories; and
this refuses an operation when one of those names is there anyway (made before the
binds, or through a server without them). git's files ref backend takes the common
directory from ``<GIT_DIR>/commondir`` even when ``GIT_COMMON_DIR`` is set, so for refs
this check and the read-only ``commondir`` are what hold, not the pin.
"""

from __future__ import annotations

import os

from agent.core.git import Git, GitError
from agent.core.projects.layout import Layout

COMMONDIR = "../.."  # what ``git worktree add`` writes: the admin dir's grandparent
MAX_COMMONDIR = 4096


def repository(layout: Layout, **kw) -> Git:
    """git on the project's repository itself."""
    _check_repository(layout)
    return Git(layout.repo, common_dir=layout.repo, **kw)


def worktree(layout: Layout, **kw) -> Git:
    """git on a conversation's worktree (its administrative directory as ``GIT_DIR``)."""
    _check_repository(layout)
    if _read(f"{layout.tree_git_dir}/commondir") != COMMONDIR:
        raise GitError("the worktree's commondir names another repository: refused")
    return Git(layout.tree_git_dir, common_dir=layout.repo, **kw)


def _check_repository(layout: Layout) -> None:
    if os.path.islink(f"{layout.repo}/objects"):
        raise GitError("the repository's objects directory is a link: refused")
    if os.path.lexists(f"{layout.repo}/objects/info/alternates"):
        raise GitError("the repository borrows objects (objects/info/alternates), which "
                       "Harness never sets up: refused until it is removed")  # fmt: skip
    if os.path.lexists(f"{layout.repo}/commondir"):
        raise GitError("the repository names another (its commondir): refused")


def _read(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        raise GitError("the worktree's commondir is missing or a link: refused") from None
    try:
        return os.read(fd, MAX_COMMONDIR).decode(errors="replace").strip()
    finally:
        os.close(fd)
