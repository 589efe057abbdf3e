"""Projects on disk with real git: the repository, worktrees, checkpoints, rewind, changes,
commits, archives; and a repository whose configuration tries to make git run a program."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import uuid
from pathlib import Path

import pytest

from agent.core.git import GitError
from agent.core.projects import checkpoints, ops, repo
from agent.core.projects.layout import Layout, LayoutError


def _ids():
    return uuid.uuid4().hex, uuid.uuid4().hex


@pytest.fixture
def project(tmp_path):
    project, conversation = _ids()
    made = ops.run(str(tmp_path), "create", {"project": project})[0]
    assert made["default_branch"] == "main"
    layout = Layout.of(str(tmp_path), project, conversation)
    added = repo.add_worktree(layout, "main")
    assert added["branch"] == f"harness/{conversation[:8]}"
    return layout, added["base_commit"]


def _write(layout, path, text):
    full = os.path.join(layout.tree, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


def _files(layout):
    found = set()
    for top, dirs, names in os.walk(layout.tree):
        dirs[:] = [d for d in dirs if d != ".git"]
        found |= {os.path.relpath(os.path.join(top, n), layout.tree) for n in names}
    return found - {".git"}


def test_an_empty_project_has_one_commit_and_a_locked_worktree(project):
    layout, base = project
    assert _files(layout) == set()
    with open(f"{layout.tree}/.git") as f:
        assert f.read().strip() == f"gitdir: {layout.tree_git_dir}"
    assert os.path.exists(f"{layout.tree_git_dir}/locked")
    assert os.listdir(f"{layout.repo}/hooks") == []


def test_checkpoints_record_the_tree_and_skip_when_unchanged(project):
    layout, base = project
    first = checkpoints.checkpoint(layout, base)
    assert first["files"] == []
    assert checkpoints.checkpoint(layout, base) is None
    _write(layout, "a.txt", "one\n")
    _write(layout, ".gitignore", "build/\n")
    _write(layout, "build/out.o", "ignored\n")
    second = checkpoints.checkpoint(layout, base)
    assert sorted(second["files"]) == [".gitignore", "a.txt"]
    assert checkpoints.checkpoint(layout, base) is None


def test_restore_is_exact_keeps_ignored_files_and_can_be_undone(project):
    layout, base = project
    _write(layout, ".gitignore", "build/\n")
    _write(layout, "keep.txt", "v1\n")
    _write(layout, "gone.txt", "will be deleted\n")
    start = checkpoints.checkpoint(layout, base)
    _write(layout, "keep.txt", "v2\n")
    os.unlink(f"{layout.tree}/gone.txt")
    _write(layout, "new/made.txt", "new\n")
    _write(layout, "build/cache", "ignored\n")
    later = checkpoints.checkpoint(layout, base)
    done = checkpoints.restore(layout, base, start["id"])
    assert done["before"] is None  # the state was just recorded
    assert _files(layout) == {".gitignore", "keep.txt", "gone.txt", "build/cache"}
    assert Path(layout.tree, "keep.txt").read_text() == "v1\n"
    assert not os.path.exists(f"{layout.tree}/new")
    assert sorted(done["after"]["files"]) == ["gone.txt", "keep.txt", "new/made.txt"]
    checkpoints.restore(layout, base, later["id"])  # undo
    assert Path(layout.tree, "keep.txt").read_text() == "v2\n"
    assert _files(layout) == {".gitignore", "keep.txt", "new/made.txt", "build/cache"}
    with pytest.raises(checkpoints.UnknownCheckpoint):
        checkpoints.restore(layout, base, base)


def test_changes_commit_and_archive(project):
    layout, base = project
    _write(layout, "a.txt", "one\ntwo\n")
    changed = checkpoints.changes(layout, base)
    assert changed["files"] == [{"path": "a.txt", "status": "added", "additions": 2,
                                 "deletions": 0}]  # fmt: skip
    assert "+two" in changed["diff"]
    made = checkpoints.commit(layout, "Add a", "Ada Lovelace", "ada@example.com")
    git = checkpoints._git(layout)
    shown = git.text("log", "-1", "--format=%an <%ae>|%cn <%ce>|%s", made["commit"])
    assert shown == "Ada Lovelace <ada@example.com>|Ada Lovelace <ada@example.com>|Add a"
    assert git.text("rev-parse", layout.branch) == made["commit"]
    assert git.text("status", "--porcelain", work_tree=layout.tree) == ""
    with pytest.raises(checkpoints.NothingToCommit):
        checkpoints.commit(layout, "again", "Ada", "ada@example.com")
    # Committed and uncommitted work together, against the branch's start.
    _write(layout, "b.txt", "b\n")
    paths = [f["path"] for f in checkpoints.changes(layout, base)["files"]]
    assert paths == ["a.txt", "b.txt"]
    data = checkpoints.archive(layout)
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        names = sorted(m.name for m in tar.getmembers() if m.isfile())
    assert names == ["a.txt", "b.txt"]


def test_two_worktrees_of_one_project_are_apart(tmp_path, project):
    layout, base = project
    other = Layout.of(layout.root, layout.project, uuid.uuid4().hex)
    repo.add_worktree(other, "main")
    _write(layout, "mine.txt", "x")
    assert not os.path.exists(f"{other.tree}/mine.txt")
    # An agent's prune in one worktree cannot drop the other (locked), even when its
    # directory is not where git expects it (another sandbox's view).
    os.rename(other.tree, other.tree + ".moved")
    checkpoints._git(layout).run("worktree", "prune")
    assert os.path.isdir(other.tree_git_dir)


def test_bad_names_are_refused(tmp_path, project):
    layout, _ = project
    with pytest.raises(LayoutError):
        Layout.of(str(tmp_path), "../etc", None)
    other = Layout.of(layout.root, layout.project, uuid.uuid4().hex)
    for base in ("--upload-pack=touch x", "main..HEAD", "nope"):
        with pytest.raises(GitError):
            repo.add_worktree(other, base)


# -- a hostile repository -------------------------------------------------------------


def _plant(layout, marker):
    """What an agent could write in bash: hooks, and configuration naming programs."""
    touch = f"touch {marker}"
    hooks = f"{layout.repo}/hooks"
    for hook in ("pre-commit", "post-checkout", "post-commit", "reference-transaction",
                 "post-index-change", "pre-auto-gc"):  # fmt: skip
        with open(f"{hooks}/{hook}", "w") as f:
            f.write(f"#!/bin/sh\n{touch}\n")
        os.chmod(f"{hooks}/{hook}", 0o755)
    included = f"{layout.home}/evil.config"
    with open(included, "w") as f:
        f.write(f'[filter "inc"]\n\tclean = {touch}\n\tsmudge = {touch}\n\trequired = true\n')
    with open(f"{layout.repo}/config", "a") as f:
        f.write(
            f"[core]\n\thooksPath = {hooks}\n\tfsmonitor = {touch}\n\tpager = {touch}\n"
            f"\tsshCommand = {touch}\n\teditor = {touch}\n"
            f'[filter "evil"]\n\tclean = {touch}\n\tsmudge = {touch}\n\tprocess = {touch}\n'
            f"\trequired = true\n"
            f'[filter "we ird=name"]\n\tclean = {touch}\n'
            f"[diff]\n\texternal = {touch}\n"
            f'[diff "evil"]\n\tcommand = {touch}\n\ttextconv = {touch}\n'
            f"[alias]\n\tstatus = !{touch}\n\tadd = !{touch}\n"
            f'[tar "tar.gz"]\n\tcommand = {touch}\n'
            f"[include]\n\tpath = {included}\n"
        )
    _write(layout, ".gitattributes", "* filter=evil diff=evil\n*.inc filter=inc\n"
                                     "*.w filter=we\\ ird=name\n")  # fmt: skip


def test_a_planted_configuration_runs_nothing(tmp_path, project):
    layout, base = project
    marker = tmp_path / "ran"
    _plant(layout, marker)
    _write(layout, "a.txt", "text\n")
    _write(layout, "b.inc", "text\n")
    first = checkpoints.checkpoint(layout, base)
    _write(layout, "a.txt", "changed\n")
    checkpoints.checkpoint(layout, base)
    checkpoints.changes(layout, base)
    checkpoints.restore(layout, base, first["id"])
    checkpoints.commit(layout, "hostile", "Ada", "ada@example.com")
    checkpoints.archive(layout)
    other = Layout.of(layout.root, layout.project, uuid.uuid4().hex)
    repo.add_worktree(other, layout.branch)  # a checkout: smudge filters, post-checkout
    ops.run(layout.root, "git", {"project": layout.project, "conversation": layout.conversation,
                                 "args": ["status"]})  # fmt: skip
    ops.run(layout.root, "git", {"project": layout.project, "conversation": layout.conversation,
                                 "args": ["diff", "HEAD~1"]})  # fmt: skip
    repo.remove_worktree(other)
    assert not marker.exists()
