"""A hostile agent racing Harness's own git: while checkpoints, changes, commits and
restores run on its conversation, its bash swaps links in and out of its repository
(the checkpoint ref's directory, the branches' directory, every loose-object directory
it lacks) toward another project of the same owner, as fast as it can. A check before
git starts cannot stop that (the link comes after it); the operation's sandbox showing
only this conversation does: nothing of the other project is written, and nothing of it
is read into an answer or into this repository.

Without a broker (a root test process: each operation runs in a one-shot sandbox as the
owner's uid); the file host's workers build the same view (tests/sandbox)."""

from __future__ import annotations

import hashlib
import os
import threading

import pytest

from agent.core.git import GitError
from agent.core.tools.workspace import PathError
from agent.runs import projects
from agent.runs.workspaces import conversation_workspace, sandbox_ids
from tests.projects.test_attacks_restore import _bash, _conversation, kim  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "the private plan"
WINDOW = 60.0  # the swapping loop's bound, should the test fail before it says stop
OPERATIONS = 40


def _tree_of(root: str) -> dict[str, str]:
    """Every entry under ``root``: a file's content hash, a link's target, a directory."""
    found = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            if os.path.islink(path):
                found[path] = "link " + os.readlink(path)
            elif os.path.isdir(path):
                found[path] = "dir"
            else:
                with open(path, "rb") as f:
                    found[path] = hashlib.sha256(f.read()).hexdigest()
    return found


def _swapping(victim: str, victim_conversation: str, mine: str) -> str:
    """The agent's loop (python in its bash: a swap takes microseconds, not a process per
    step): links toward the victim's refs and objects, in for a few milliseconds, out
    for a few, until told to stop."""
    return f"""python3 - "$PWD" "$(git rev-parse --git-common-dir)" <<'PY'
import os, random, sys, time
tree, common = sys.argv[1:]
os.chdir(common)
pairs = [
    ("refs/harness/checkpoints/{mine}",
     "{victim}/repo.git/refs/harness/checkpoints/{victim_conversation}"),
    ("refs/heads/harness", "{victim}/repo.git/refs/heads/harness"),
]
prefixes = ["objects/%02x" % i for i in range(0, 256, 16)]  # a few: each swap is quick
for name, _ in pairs:
    os.makedirs(name, exist_ok=True)
end, swaps = time.monotonic() + {WINDOW}, 0
while time.monotonic() < end and not os.path.exists(tree + "/stop"):
    swaps += 1
    with open(tree + "/counter.txt", "w") as f:
        f.write(str(swaps))
    for name, target in pairs:
        try:
            os.rename(name, name + ".aside")
            os.symlink(target, name)
        except OSError:  # git was writing there: next round
            pass
    linked = []
    for p in prefixes:
        try:
            os.symlink("{victim}/repo.git/" + p, p)
            linked.append(p)
        except FileExistsError:  # this repository has that directory (git may make it now)
            pass
    time.sleep(random.uniform(0.005, 0.04))
    for name, _ in pairs:
        if os.path.islink(name):
            os.unlink(name)
        if os.path.lexists(name + ".aside"):
            try:
                os.rename(name + ".aside", name)
            except OSError:  # git made the directory again meanwhile: the next round
                pass
    for p in linked:
        try:
            os.unlink(p)
        except OSError:  # git may have met it meanwhile
            pass
    time.sleep(random.uniform(0.002, 0.02))
print("swapped", swaps, "times")
PY
"""


def test_links_swapped_in_during_operations_reach_no_other_project(kim):  # noqa: F811
    user, client = kim
    private = _conversation(client, "private")
    _bash(private, f"echo '{SECRET}' > plan.txt")
    ids = {projects.commit(private, "the plan", user)}
    ids.add(projects.checkpoint(private)["id"])
    victim_home = conversation_workspace(private).root.parent.parent
    before = _tree_of(str(victim_home))
    victim = f"/projects/{private.project_id.hex}"
    mine = _conversation(client, "mine")
    tree = conversation_workspace(mine).root
    assert projects.checkpoint(mine) is not None  # its prompt's first (its index made)
    said: list[str] = []
    loop = threading.Thread(
        target=lambda: said.append(_bash(mine, _swapping(victim, private.id.hex, mine.id.hex)))
    )
    loop.start()
    answers: list[str] = []
    try:
        for i in range(OPERATIONS):
            try:
                if i % 8 == 1:
                    answers.append(repr(projects.changes(mine)))
                elif i % 8 == 3:
                    answers.append(projects.commit(mine, f"commit {i}", user))
                elif i % 8 != 5:
                    answers.append(repr(projects.checkpoint(mine)))
                else:
                    made = projects.checkpoint(mine)
                    if made is not None:
                        answers.append(repr(projects.restore(mine, made["id"])))
            # A refusal, git meeting a link, or a file the operation reads swapped away
            # under it (PathError, seen in a loaded CI run): each is fine, none may leak.
            except (GitError, PathError) as exc:
                answers.append(str(exc))
    finally:
        stop = tree / "stop"
        stop.write_text("")
        os.chown(stop, *sandbox_ids(user.pk))
        loop.join(WINDOW + 60)
    assert said and "swapped" in said[0], said
    assert int(said[0].split()[-2]) >= 10, said  # the links came and went throughout
    # Nothing of the other project written (its refs, objects, worktree, state)...
    assert _tree_of(str(victim_home)) == before
    # ... nor read: not into an answer, not into this repository.
    shown = "\n".join(answers)
    assert SECRET not in shown and not any(commit in shown for commit in ids), shown
    out = _bash(mine, f"rm -f stop; git rev-list --all | tail -n 100000; "
                      f"for c in {' '.join(ids)}; do git cat-file -e $c 2>/dev/null "
                      "&& echo has $c; done; git grep -h 'private plan' $(git rev-list --all) "
                      "2>/dev/null | head -3; true")  # fmt: skip
    assert not any(commit in out for commit in ids) and SECRET not in out, out
    # and once the links are gone, the operations work again on a sound repository.
    assert projects.changes(mine)["base"] == mine.base_commit
