"""A worktree's whole tree as commits on a hidden ref, and what is read from the tree.

A checkpoint is ``git add -A`` against the conversation's private index (kept between
checkpoints, so an unchanged file costs a stat), ``write-tree``, ``commit-tree`` with the
previous checkpoint as parent and ``update-ref`` of ``refs/harness/checkpoints/<conv>/head``
(never the branch; never pushed). Everything ``.gitignore`` excludes stays out, and is left
alone by a restore.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import gzip
import os
from collections.abc import Iterator

from agent.core.git import Git, GitError
from agent.core.projects import pinned
from agent.core.projects.layout import Layout

ARCHIVE_CAP = 60 * 1024 * 1024
DIFF_CAP = 2 * 1024 * 1024
MAX_FILES = 5000  # paths a checkpoint event or a changes answer names
ZERO = "0" * 40
# A git command run beside another of the same checkpoint (each waits on its own process).
POOL = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="checkpoint")


class NothingToCommit(GitError):
    pass


class UnknownCheckpoint(GitError):
    pass


@contextlib.contextmanager
def _lock(layout: Layout) -> Iterator[None]:
    """One operation at a time on a worktree's private index, across threads and the
    processes of a server without a broker (each opens the lock file: flock is per open
    file). git's own ``<index>.lock`` would fail a second writer instead of waiting."""
    os.makedirs(layout.state, 0o700, exist_ok=True)  # (an operation's sandbox shows it made)
    fd = os.open(f"{layout.index}.flock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _git(layout: Layout) -> Git:
    if not os.path.isdir(layout.tree):
        raise GitError("the conversation's worktree is missing")
    git = pinned.worktree(layout)
    git.drivers()  # read once, before commands run side by side
    return git


def _resolve(git: Git, name: str) -> str | None:
    found = git.run("rev-parse", "--verify", "--quiet", "--end-of-options", name, check=False)
    return found.out.decode().strip() or None if found.code == 0 else None


def _snapshot(git: Git, layout: Layout) -> str:
    """The worktree's tree now (the private index brought up to date)."""
    if not os.path.exists(layout.index):
        # Seeded from the branch: a tracked file the .gitignore matches stays recorded.
        git.run("read-tree", "HEAD", index=layout.index)
    git.run("add", "--all", "--", ".", work_tree=layout.tree, index=layout.index)
    return git.text("write-tree", index=layout.index)


def _changed(git: Git, old_tree: str, new_tree: str) -> list[str]:
    out = git.run("diff-tree", "-r", "-z", "--name-only", "--no-renames", old_tree, new_tree).out
    return [p.decode(errors="replace") for p in out.split(b"\0") if p][:MAX_FILES]


def checkpoint(layout: Layout, base: str) -> dict | None:
    """Record the worktree: ``{"id", "files"}``, or None when nothing changed since the
    previous checkpoint (the first one is always recorded; its files: against ``base``)."""
    with _lock(layout):
        return _checkpoint(_git(layout), layout, base)


def _checkpoint(git: Git, layout: Layout, base: str) -> dict | None:
    # Fewer git processes one after another (each costs its start): the previous
    # checkpoint is read while ``add`` runs, the changed paths listed while the commit is
    # made and the ref moved.
    previous = POOL.submit(_previous, git, layout)
    tree = _snapshot(git, layout)
    parent, before = previous.result()
    if parent is None:
        before = git.text("rev-parse", f"{base}^{{tree}}")
    elif before == tree:
        return None
    files = POOL.submit(_changed, git, before, tree)
    parents = ["-p", parent] if parent else []
    commit = git.text("commit-tree", tree, *parents, "-m", "harness checkpoint")
    git.run("update-ref", layout.checkpoints_ref, commit, parent or ZERO)
    return {"id": commit, "files": files.result()}


def _previous(git: Git, layout: Layout) -> tuple[str | None, str]:
    """The last checkpoint and its tree (None, "" before the first), in one process."""
    out = git.text("for-each-ref", "--format=%(objectname) %(tree)", "--",
                   layout.checkpoints_ref)  # fmt: skip
    commit, _, tree = out.partition(" ")
    return commit or None, tree


def restore(layout: Layout, base: str, target: str) -> dict:
    """The worktree made exactly ``target``'s tree (one of this conversation's
    checkpoints), after a checkpoint of the state it replaces: ``{"before", "after"}``,
    each a checkpoint or None."""
    with _lock(layout):
        git = _git(layout)
        head = _resolve(git, layout.checkpoints_ref)
        known = head is not None and isinstance(target, str) and len(target) == 40
        if not known or git.run("merge-base", "--is-ancestor", target, head, check=False).code:
            raise UnknownCheckpoint("not a checkpoint of this conversation")
        before = _checkpoint(git, layout, base)
        # The private index holds the tree just recorded: --reset -u turns it and the files
        # into the target's, removing what the target lacks; untracked (ignored) files stay.
        git.run("read-tree", "--reset", "-u", f"{target}^{{tree}}", work_tree=layout.tree,
                index=layout.index)  # fmt: skip
        after = _checkpoint(git, layout, base)
        return {"before": before, "after": after}


def changes(layout: Layout, base: str) -> dict:
    """The worktree (committed and uncommitted work) against ``base``."""
    with _lock(layout):
        git = _git(layout)
        tree = _snapshot(git, layout)
    spec = ("diff-tree", "-r", "-z", "-M", "--no-ext-diff", "--no-textconv", base, tree)
    numbers = git.run(*spec[:3], "--numstat", *spec[3:]).out.split(b"\0")
    statuses = git.run(*spec[:3], "--name-status", *spec[3:]).out.split(b"\0")
    patch = git.run(*spec[:2], "-p", *spec[2:], cap=64 * 1024 * 1024).out
    files = []
    i = 0
    while i < len(statuses) - 1 and len(files) < MAX_FILES:
        code = statuses[i].decode()[:1]
        if code in "RC":
            path = statuses[i + 2].decode(errors="replace")
            i += 3
        else:
            path = statuses[i + 1].decode(errors="replace")
            i += 2
        status = {"A": "added", "D": "deleted", "R": "renamed", "C": "added"}.get(code, "modified")
        files.append({"path": path, "status": status, "additions": 0, "deletions": 0})
    counts = _numstat(numbers)
    for entry in files:
        entry["additions"], entry["deletions"] = counts.get(entry["path"], (0, 0))
    diff = patch[:DIFF_CAP].decode(errors="replace")
    return {"base": base, "files": files, "diff": diff, "truncated": len(patch) > DIFF_CAP}


def _numstat(parts: list[bytes]) -> dict[str, tuple[int, int]]:
    counts = {}
    i = 0
    while i < len(parts) - 1:
        added, deleted, path = (parts[i].decode(errors="replace").split("\t", 2) + ["", ""])[:3]
        if path == "":  # a rename: the old and the new path follow
            path = parts[i + 2].decode(errors="replace")
            i += 3
        else:
            i += 1
        counts[path] = (
            int(added) if added.isdigit() else 0,
            int(deleted) if deleted.isdigit() else 0,
        )
    return counts


def commit(layout: Layout, message: str, name: str, email: str) -> dict:
    """The worktree committed on its branch, ``name <email>`` its author and committer."""
    with _lock(layout):
        git = _git(layout)
        tree = _snapshot(git, layout)
        # On the conversation's branch, wherever the agent moved HEAD meanwhile.
        head = git.text("rev-parse", "--verify", f"refs/heads/{layout.branch}")
        if git.text("rev-parse", f"{head}^{{tree}}") == tree:
            raise NothingToCommit("nothing to commit: the worktree is its branch's last commit")
        who = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
               "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}  # fmt: skip
        made = git.text("commit-tree", tree, "-p", head, "-F", "-", stdin=message.encode(),
                        extra=who)  # fmt: skip
        git.run("update-ref", f"refs/heads/{layout.branch}", made, head)
        if git.run("symbolic-ref", "-q", "HEAD", check=False).out.strip() == (
            f"refs/heads/{layout.branch}".encode()
        ):
            # The worktree's own index follows (as after ``git commit -a``): `git status`
            # in the agent's bash shows a clean tree.
            git.run("read-tree", made)
        return {"commit": made}


def archive(layout: Layout) -> bytes:
    """The worktree's files (what ``.gitignore`` keeps) as ``.tar.gz``, without ``.git``.
    git writes a plain tar (no configured compressor runs); it is gzipped here."""
    with _lock(layout):
        git = _git(layout)
        tree = _snapshot(git, layout)
    tar = git.run("archive", "--format=tar", tree, cap=ARCHIVE_CAP).out
    return gzip.compress(tar, mtime=0)
