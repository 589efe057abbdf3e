"""The symlink race, reproduced: a process swaps a directory of the workspace with a symlink
to a directory outside it (``renameat2(RENAME_EXCHANGE)``, as a sandboxed command can)
as fast as it can, while every file tool and the file browser work on paths through it.

The red team's version of this truncated a root-only file outside the workspace, zeroed
the server's database and chowned a root directory to the sandbox user. Here a root-owned
canary file and directory wait outside under the same names the tools ask for: after
seconds of racing, none of them changed and nothing was created outside."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.core.tools.files import EditTool, ReadTool, WriteTool
from agent.core.tools.search import GrepTool, ListDirTool
from agent.core.tools.workspace import PathError, Workspace
from agent.ui import browse

RACE_SECONDS = 3.0  # at least this long, and at least MIN_CALLS tool calls...
MIN_CALLS = 25
RACE_CAP_SECONDS = 60.0  # ...but no longer than this (a loaded machine's calls are slow)
CANARY = "CANARY: a root-owned file outside the workspace\n"
INSIDE = "inside: old_str here\n"

# A swapper that runs in its own process (true parallelism, no GIL shared with the tools):
# it exchanges `d` (a directory) and `s` (a symlink to the outside directory) atomically,
# and also replaces `d` by a symlink the plain way (rename over it), like a racing `mv`.
SWAPPER = r"""
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
os.chdir(sys.argv[1])
deadline = time.monotonic() + float(sys.argv[2])
stopped = False
def stop(*_):
    global stopped
    stopped = True
signal.signal(signal.SIGTERM, stop)
swaps = 0
while not stopped and time.monotonic() < deadline:
    if libc.renameat2(AT_FDCWD, b"d", AT_FDCWD, b"s", RENAME_EXCHANGE) == 0:
        swaps += 1
print(swaps)
"""


def _snapshot(top: Path) -> dict[str, tuple]:
    """Everything under ``top``: kind, owner, mode and a hash of each file's content."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
            seen[str(path.relative_to(top))] = (st.st_mode, st.st_uid, st.st_gid, digest)
    st = top.lstat()
    seen["."] = (st.st_mode, st.st_uid, st.st_gid, "")
    return seen


@pytest.fixture(params=["server-identity", "owner-identity"])
def arena(request, tmp_path):
    """A workspace with `d` (a directory) and `s` (a symlink to `outside`), and `outside`,
    a root-owned directory beside it holding files with the names the tools ask for.
    ``owner-identity``: the workspace belongs to an unprivileged uid, as in production,
    and file work takes on its identity; ``server-identity``: the workspace is the server's
    own (print mode), so only the descriptor walk stands between the tools and `outside`."""
    if request.param == "owner-identity" and os.geteuid() != 0:
        pytest.skip("giving the workspace to another uid needs root")
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    for name in ("target.txt", "canary.txt"):
        (outside / name).write_text(CANARY)
        (outside / name).chmod(0o644)
    root = tmp_path / "workspace"
    (root / "d").mkdir(parents=True)
    (root / "d" / "target.txt").write_text(INSIDE)
    os.symlink(outside, root / "s")
    if request.param == "owner-identity":
        tmp_path.chmod(0o755)
        for path in (root, root / "d", root / "d" / "target.txt"):
            os.chown(path, 201_000, 201_000)
        os.lchown(root / "s", 201_000, 201_000)
    return root, outside


def _race(root: Path, work) -> tuple[int, list]:
    """Run ``work()`` over and over while the swapper races it (for RACE_SECONDS and
    MIN_CALLS calls, whichever comes last); (swaps, results)."""
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(root), str(RACE_CAP_SECONDS + 30)],
        stdout=subprocess.PIPE,
        text=True,
    )
    results = []
    started = time.monotonic()
    try:
        while (elapsed := time.monotonic() - started) < RACE_CAP_SECONDS and (
            elapsed < RACE_SECONDS or len(results) < MIN_CALLS
        ):
            try:
                results.append(work())
            except Exception as exc:  # a crash is a failure too, asserted after the canaries
                results.append(f"CRASHED: {exc!r}")
    finally:
        swapper.terminate()
        out, _ = swapper.communicate(timeout=30)
    return int(out), results


TOOLS = {
    "read": (ReadTool, {"path": "d/target.txt"}),
    "write": (WriteTool, {"path": "d/target.txt", "content": "written\n"}),
    "write-new-dir": (WriteTool, {"path": "d/newdir/planted.txt", "content": "x"}),
    "edit": (EditTool, {"path": "d/target.txt", "old_str": "old_str", "new_str": "new_str"}),
    "grep": (GrepTool, {"pattern": "CANARY\\|inside", "path": "d/target.txt"}),
    "grep-recursive": (GrepTool, {"pattern": "CANARY", "path": "d", "recursive": True}),
    "list_dir": (ListDirTool, {"path": "d"}),
}


@pytest.mark.parametrize("name", list(TOOLS))
def test_racing_a_symlink_swap_never_reaches_outside_the_workspace(arena, name):
    root, outside = arena
    tool_cls, params = TOOLS[name]
    before = _snapshot(outside)

    def work():
        async def once():
            workspace = Workspace(root)
            try:
                return (await tool_cls(workspace).execute(params)).content
            finally:
                workspace.close()

        return asyncio.run(once())

    swaps, results = _race(root, work)
    assert swaps > 100, "the swapper did not race"
    assert len(results) >= MIN_CALLS, "the tool did not race"
    assert _snapshot(outside) == before, "something outside the workspace changed"
    assert not any("CANARY" in r for r in results), "a tool read outside the workspace"
    assert not any(r.startswith("CRASHED") for r in results), "a tool crashed under the race"
    if name == "list_dir":  # outside's listing names canary.txt, which d never holds
        assert not any("canary.txt" in r for r in results)


@pytest.mark.parametrize("path", ["d/target.txt", "d"])
def test_racing_a_symlink_swap_never_shows_outside_in_the_file_browser(arena, path):
    root, outside = arena
    before = _snapshot(outside)

    def work():
        workspace = Workspace(root)
        try:
            _, shown, _ = browse.browse(workspace, path)
        except PathError as exc:
            return str(exc)
        finally:
            workspace.close()
        if isinstance(shown, browse.FileView):
            return shown.text or ""
        return " ".join(entry.name for entry in shown)

    swaps, results = _race(root, work)
    assert swaps > 100 and len(results) >= MIN_CALLS
    assert _snapshot(outside) == before
    assert not any("CANARY" in r or "canary.txt" in r for r in results)
    assert not any(r.startswith("CRASHED") for r in results)
    assert any("inside" in r or "target.txt" in r for r in results), "never saw the inside"
