"""A project's repository and its conversations' worktrees: made, and removed."""

from __future__ import annotations

import os
import re
import shutil
import stat

from agent.core.git import NEUTRAL, Git, GitError, environment, run, with_config
from agent.core.projects import pinned
from agent.core.projects.layout import Layout

DEFAULT_BRANCH = "main"
# What ``base`` may name: a branch, a tag or a commit; never an option, never a range.
REF = re.compile(r"^(?!-)(?!.*\.\.)[A-Za-z0-9._/@^~{}-]{1,255}$")


def prepare(layout: Layout) -> dict:
    """The project's directory, its worktrees' and state's homes (no repository yet)."""
    if os.path.lexists(layout.home):
        raise GitError("the project's directory exists already")
    os.makedirs(f"{layout.home}/trees", mode=0o700)
    os.makedirs(f"{layout.home}/state", mode=0o700)
    return {}


def _init(layout: Layout) -> Git:
    env = with_config(environment(), NEUTRAL)
    # No template: no sample hooks; hooks/ stays an empty directory (read-only in the
    # agents' sandboxes).
    result = run(["init", "--quiet", "--bare", "--template=", f"--initial-branch={DEFAULT_BRANCH}",
                  layout.repo], cwd=layout.home, env=env)  # fmt: skip
    if result.code != 0:
        raise GitError(result.err or "git init failed")
    os.mkdir(f"{layout.repo}/hooks", 0o755)
    return pinned.repository(layout)


def create(layout: Layout) -> dict:
    """An empty repository with one initial commit on ``main``."""
    prepare(layout)
    git = _init(layout)
    tree = git.text("mktree", stdin=b"")
    commit = git.text("commit-tree", tree, "-m", "Initial commit")
    git.run("update-ref", f"refs/heads/{DEFAULT_BRANCH}", commit, "")
    return {"default_branch": DEFAULT_BRANCH, "commit": commit}


def create_from_import(layout: Layout) -> dict:
    """A repository whose first commit on ``main`` is what an archive unpacked into the
    project's ``import`` directory (after ``prepare``): every file its ``.gitignore`` keeps,
    as ``git add --all`` would. The directory goes either way."""
    source = layout.imported
    index = f"{layout.home}/state/import.index"
    try:
        git = _init(layout)
        git.run("add", "--all", "--", ".", work_tree=source, index=index)
        tree = git.text("write-tree", index=index)
        commit = git.text("commit-tree", tree, "-m", "Imported from an archive")
        git.run("update-ref", f"refs/heads/{DEFAULT_BRANCH}", commit, "")
    finally:
        _remove(source)
        if os.path.lexists(index):
            os.unlink(index)
    return {"default_branch": DEFAULT_BRANCH, "commit": commit}


def add_worktree(layout: Layout, base: str) -> dict:
    """The conversation's worktree on a new branch ``harness/<8 hex>`` made from ``base``,
    locked (an agent's ``git worktree prune`` elsewhere cannot drop it)."""
    if not isinstance(base, str) or not REF.match(base):
        raise GitError(f"not a branch or commit: {str(base)[:100]!r}")
    git = pinned.repository(layout)
    found = git.run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{base}^{{commit}}",
                    check=False)  # fmt: skip
    if found.code != 0:
        raise GitError(f"no branch or commit {base!r} in the project")
    commit = found.out.decode().strip()
    # The agents' own `git gc` writes nothing in objects/info (read-only in their
    # sandboxes: no alternates), so it runs to its end: no objects/info/packs (only dumb
    # HTTP serving reads it), no commit-graph there. The repository's configuration is
    # read-only to them, Harness's to write; set on every worktree made, old projects too.
    for key in ("repack.updateServerInfo", "gc.writeCommitGraph"):
        git.run("config", key, "false")
    git.run("worktree", "add", "--quiet", "--lock", "--reason", "harness conversation",
            "-b", layout.branch, layout.tree, commit)  # fmt: skip
    return {"branch": layout.branch, "base_commit": commit}


def remove_worktree(layout: Layout) -> dict:
    """The worktree and its private state gone; the branch and the checkpoints stay."""
    git = pinned.repository(layout)
    if os.path.lexists(layout.tree):
        git.run("worktree", "remove", "--force", "--force", layout.tree, check=False)
        _remove(layout.tree)
    git.run("worktree", "prune", check=False)  # only ours: the others are locked
    _remove(layout.state)
    _remove(f"{layout.home}/state/{layout.conversation}.index")  # the layout's earlier place
    return {}


def delete(layout: Layout) -> dict:
    _remove(layout.home)
    return {}


def _remove(path: str) -> None:
    """``rm -rf`` that also gets through directories an agent made read-only."""

    def unlock(function, name, _exc) -> None:
        parent = os.path.dirname(name)
        os.chmod(parent, stat.S_IRWXU)
        if os.path.isdir(name) and not os.path.islink(name):
            os.chmod(name, stat.S_IRWXU)
            shutil.rmtree(name, onerror=unlock)
        else:
            os.unlink(name)

    if os.path.lexists(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, onerror=unlock)
        else:
            os.unlink(path)
