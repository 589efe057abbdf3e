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
import shutil
import tempfile

from agent.core.git import Git, GitError
from agent.core.projects.layout import Layout

COMMONDIR = "../.."  # what ``git worktree add`` writes: the admin dir's grandparent
MAX_COMMONDIR = 4096
MAX_ENTRIES = 20000


def repository(layout: Layout, **kw) -> Git:
    """git on the project's repository itself, through a git directory of Harness's own
    in ``state/`` (no agent's view holds it) whose ``commondir`` names the repository:
    the files ref backend reads that one, not one the agent may put in the repository
    between the check below and git's start."""
    _check_repository(layout)
    return Git(_own_git_dir(layout), common_dir=layout.repo, **kw)


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
    _refuse_links(layout.repo)


def _refuse_links(repo: str) -> None:
    """No link where git would follow one out of the repository: any directory under
    ``refs`` (a ref written there lands where the link points), ``packed-refs``, and the
    directories of ``objects`` (loose objects and packs written and read through them).
    A check, so a race: an agent's process may put one there while git runs (SECURITY.md
    says what would close it). Bounded: a repository with more loose ref directories
    than this is refused too."""
    if os.path.islink(f"{repo}/packed-refs") or os.path.islink(f"{repo}/refs"):
        raise GitError("the repository's refs are a link: refused")
    seen = 0
    pending = [f"{repo}/refs", f"{repo}/objects"]
    while pending:
        top = pending.pop()
        with os.scandir(top) as entries:
            for entry in entries:
                seen += 1
                if seen > MAX_ENTRIES:
                    raise GitError("the repository has too many loose refs to check")
                if entry.is_symlink():
                    raise GitError(f"a link in the repository ({entry.path[len(repo) + 1 :]})"
                                   ": refused")  # fmt: skip
                if entry.is_dir(follow_symlinks=False) and not top.endswith("/objects"):
                    pending.append(entry.path)


def _own_git_dir(layout: Layout) -> str:
    """``state/git``: a ``HEAD`` and a ``commondir`` (what git needs of a git directory
    whose common directory is elsewhere, as for a worktree's), made once, whole: written
    aside and renamed into place, so a concurrent operation never finds half of it."""
    path = f"{layout.home}/state/git"
    if not os.path.isdir(path):
        made = tempfile.mkdtemp(prefix=".git-", dir=f"{layout.home}/state")
        for name, text in (("HEAD", "ref: refs/heads/main\n"), ("commondir", f"{layout.repo}\n")):
            with open(f"{made}/{name}", "w") as out:
                out.write(text)
        try:
            os.rename(made, path)
        except OSError:  # made meanwhile by another operation
            shutil.rmtree(made, ignore_errors=True)
    return path


def _read(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        raise GitError("the worktree's commondir is missing or a link: refused") from None
    try:
        return os.read(fd, MAX_COMMONDIR).decode(errors="replace").strip()
    finally:
        os.close(fd)
