"""Hostile inputs to the file tools beyond escapes: each test is a red-team finding
reproduced (descriptor leaks and exhaustion, unbounded memory, a file emptied or
half-written, a write that lands after it was reported failed, a host path in an error)."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from agent.core.tools.fileio import FileWorkers
from agent.core.tools.files import EditTool, ReadTool, WriteTool
from agent.core.tools.search import GrepTool, ListDirTool
from agent.core.tools.workspace import PathError, Workspace
from tests.conftest import REPO
from tests.helpers import run


def _tools_in_a_child(root, limit: str, calls: str) -> list[dict]:
    """Run tool calls (a Python tuple of (tool class, params)) in a child process under a
    resource limit (``limit``, a statement); their results, parsed."""
    code = (
        "import asyncio, resource, signal, sys\n"
        f"{limit}\n"
        "from agent.core.tools.files import EditTool, ReadTool, WriteTool\n"
        "from agent.core.tools.workspace import Workspace\n"
        "ws = Workspace(sys.argv[1])\n"
        f"for tool, params in ({calls},):\n"
        "    print(asyncio.run(tool(ws).execute(params)).content)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(root)], cwd=REPO, capture_output=True,
                         text=True, timeout=60, check=True).stdout  # fmt: skip
    return [json.loads(line) for line in out.splitlines()]


def _open_fds() -> int:
    # Earlier tests' unreachable objects close their descriptors when collected; collected
    # now, they cannot close one between the two counts (a count that went down, not a leak).
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


def test_a_lone_surrogate_in_a_path_is_refused_and_leaks_no_descriptor(workspace):
    os.makedirs(workspace.root / ("d/" * 50))
    path = "d/" * 50 + "\ud800"
    before = _open_fds()
    for tool, params in [
        (ReadTool, {"path": path}),
        (WriteTool, {"path": path, "content": "x"}),
        (EditTool, {"path": path, "old_str": "a", "new_str": "b"}),
        (GrepTool, {"pattern": "a", "path": path}),
        (ListDirTool, {"path": path}),
    ]:
        result, is_error = run(tool(workspace), **params)
        assert is_error and result == {"error": "path is not valid Unicode"}
    assert _open_fds() == before


def test_a_walk_holds_one_descriptor_whatever_the_depth(tmp_path):
    """A file 600 directories down is read by a process allowed only 64 descriptors (the
    walk once held one per level: deep paths, or symlinks leading thousands of levels
    down, used up the whole server's table)."""
    root = tmp_path / "ws"
    deep = root / ("a/" * 600)
    deep.mkdir(parents=True)
    (deep / "f.txt").write_text("found\n")
    os.symlink("a/" * 600 + "f.txt", root / "link")
    limit = "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))"
    calls = "(ReadTool, {'path': 'a/' * 600 + 'f.txt'}), (ReadTool, {'path': 'link'})"
    assert _tools_in_a_child(root, limit, calls) == [{"content": "found\n"}] * 2


def test_a_path_of_endless_components_is_refused(workspace):
    result, is_error = run(WriteTool(workspace), path="a/" * 5000 + "f", content="x")
    assert is_error and result == {"error": "path is too deep"}
    assert not (workspace.root / "a").exists()


def test_a_line_range_of_an_endless_line_is_refused_without_reading_it(workspace):
    """8 GiB of zeros after a text head: a sparse file that costs its owner nothing. The
    range read once held the whole line in memory."""
    with open(workspace.root / "sparse.txt", "wb") as f:
        f.write(b"a" * 9000)
        f.truncate(8 << 30)
    started = time.monotonic()
    result, is_error = run(ReadTool(workspace), path="sparse.txt", start_line=1, end_line=1)
    assert is_error and "longer than 1 MB" in result["error"]
    assert time.monotonic() - started < 10


def test_an_edit_with_a_lone_surrogate_leaves_the_file_as_it_was(workspace):
    original = "print('hello')\n" * 100
    (workspace.root / "main.py").write_text(original)
    result, is_error = run(
        EditTool(workspace), path="main.py", old_str="print('hello')\n" * 51 + "print",
        new_str="print('\ud83d')\nprint",
    )  # fmt: skip
    assert is_error and "not valid Unicode" in result["error"]
    assert (workspace.root / "main.py").read_text() == original


def test_a_write_with_a_lone_surrogate_is_a_clear_error(workspace):
    result, is_error = run(WriteTool(workspace), path="f.txt", content="half \udc00 emoji")
    assert is_error and "not valid Unicode" in result["error"]
    assert not (workspace.root / "f.txt").exists()


def test_a_write_or_edit_that_runs_out_of_room_leaves_the_old_file_whole(tmp_path):
    """The file size limit stands in for a full quota (same failure, mid-write): the old
    content survives, no partial file or temporary is left."""
    root = tmp_path / "ws"
    root.mkdir()
    old = "x = 1\n" * 100
    (root / "f.py").write_text(old)
    limit = (
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))"
    )
    calls = (
        "(WriteTool, {'path': 'f.py', 'content': 'y' * 5000}), "
        "(EditTool, {'path': 'f.py', 'old_str': 'x = 1\\n' * 100, 'new_str': 'z' * 5000})"
    )
    errors = [result["error"] for result in _tools_in_a_child(root, limit, calls)]
    assert errors == ["file too large", "cannot edit file: file too large"]
    assert (root / "f.py").read_text() == old
    assert sorted(p.name for p in root.iterdir()) == ["f.py"]


def test_write_keeps_an_existing_files_mode_and_replaces_a_hard_link_not_its_target(
    workspace, tmp_path
):
    script = workspace.root / "run.sh"
    script.write_text("old\n")
    script.chmod(0o750)
    run(WriteTool(workspace), path="run.sh", content="new\n")
    assert script.read_text() == "new\n" and (script.stat().st_mode & 0o777) == 0o750
    outside = tmp_path / "outside.txt"
    outside.write_text("host file\n")
    os.link(outside, workspace.root / "hard.txt")
    result, is_error = run(WriteTool(workspace), path="hard.txt", content="mine\n")
    assert not is_error and outside.read_text() == "host file\n"
    assert (workspace.root / "hard.txt").read_text() == "mine\n"


def test_a_call_that_timed_out_while_queued_never_runs(tmp_path):
    """With every worker busy, a write waits past its deadline: the model is told it
    failed, so it must not land later (perhaps over a retry)."""
    pool = FileWorkers(threads=1, per_workspace=2)
    busy, queued = tmp_path / "busy", tmp_path / "queued"
    busy.mkdir()
    queued.mkdir()
    release = threading.Event()
    blocker = pool.submit(Workspace(busy), release.wait, 10)
    late = Workspace(queued)
    write = WriteTool(late)
    with pytest.raises(PathError, match="did not finish within"):
        asyncio.run(pool.run(late, write._execute, {"path": "late.txt", "content": "x"},
                             timeout=0.2))  # fmt: skip
    release.set()
    blocker.result(5)
    assert pool.submit(late, lambda: "free").result(5) == "free"  # its place was given back
    assert not (queued / "late.txt").exists()


def test_grep_errors_never_name_the_grep_binarys_path(workspace):
    if os.geteuid() != 0:
        pytest.skip("needs root: a file the workspace's owner cannot read")
    os.chown(workspace.root, 201_500, 201_500)
    (workspace.root / "rootonly").write_text("secret\n")
    (workspace.root / "rootonly").chmod(0o600)
    result, is_error = run(GrepTool(workspace), pattern="nothing", path=".", recursive=True)
    assert is_error and "/usr/" not in result["error"] and "/bin/" not in result["error"]
    assert "Permission denied" in result["error"]
