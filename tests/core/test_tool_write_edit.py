"""write and edit: confined, exact, with structured display data for the UI."""

from __future__ import annotations

import os

import pytest

from agent.core.tools.files import EditTool, WriteTool
from tests.helpers import run


@pytest.fixture
def write(workspace):
    return WriteTool(workspace)


@pytest.fixture
def edit(workspace):
    (workspace.root / "code.py").write_text("a = 1\nb = 2\nc = 1\n")
    return EditTool(workspace)


def test_write_creates_file_and_parent_directories(write, workspace):
    result, is_error = run(write, path="pkg/mod/new.py", content="print('hi')\n")
    assert not is_error and "Created" in result["result"]
    assert (workspace.root / "pkg/mod/new.py").read_text() == "print('hi')\n"


def test_write_overwrites_existing_file(write, workspace):
    (workspace.root / "f.txt").write_text("old content that is longer")
    result, _ = run(write, path="f.txt", content="new")
    assert "Overwrote" in result["result"] and (workspace.root / "f.txt").read_text() == "new"


def test_write_empty_content_is_allowed(write, workspace):
    assert not run(write, path="empty.txt", content="")[1]
    assert (workspace.root / "empty.txt").read_text() == ""


def test_write_reports_display_data(write):
    result = __import__("asyncio").run(write.execute({"path": "d.txt", "content": "xyz"}))
    assert result.display == {"kind": "write", "path": "d.txt", "bytes": 3, "created": True}


@pytest.mark.parametrize("path", ["/tmp/harness-escape.txt", "../escape.txt", "a/../../x.txt"])
def test_write_outside_workspace_is_refused(write, path):
    result, is_error = run(write, path=path, content="x")
    assert is_error and result == {"error": "path is outside the workspace"}
    assert not os.path.exists("/tmp/harness-escape.txt")


def test_write_through_symlinked_directory_out_of_workspace_is_refused(write, workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, workspace.root / "out")
    result, is_error = run(write, path="out/planted.txt", content="x")
    assert is_error and not (outside / "planted.txt").exists()


def test_write_to_a_dangling_symlink_pointing_outside_is_refused(write, workspace, tmp_path):
    target = tmp_path / "created-by-symlink.txt"
    os.symlink(target, workspace.root / "dangling")
    result, is_error = run(write, path="dangling", content="x")
    assert is_error and not target.exists()


def test_write_onto_a_directory_is_an_error(write, workspace):
    (workspace.root / "dir").mkdir()
    result, is_error = run(write, path="dir", content="x")
    assert is_error


def test_edit_replaces_a_unique_match_and_returns_a_diff(edit, workspace):
    result = __import__("asyncio").run(
        edit.execute({"path": "code.py", "old_str": "b = 2", "new_str": "b = 3"})
    )
    assert not result.is_error
    assert (workspace.root / "code.py").read_text() == "a = 1\nb = 3\nc = 1\n"
    assert result.display["kind"] == "diff"
    assert "-b = 2" in result.display["diff"] and "+b = 3" in result.display["diff"]


def test_edit_old_str_not_found_is_an_error(edit, workspace):
    result, is_error = run(edit, path="code.py", old_str="zzz", new_str="y")
    assert is_error and "not found" in result["error"]
    assert (workspace.root / "code.py").read_text() == "a = 1\nb = 2\nc = 1\n"


def test_edit_old_str_matching_several_times_is_an_error(edit, workspace):
    result, is_error = run(edit, path="code.py", old_str="= 1", new_str="= 9")
    assert is_error and "2 times" in result["error"]
    assert (workspace.root / "code.py").read_text() == "a = 1\nb = 2\nc = 1\n"


def test_edit_empty_old_str_is_an_error(edit):
    result, is_error = run(edit, path="code.py", old_str="", new_str="x")
    assert is_error


def test_edit_shrinking_file_leaves_no_stale_bytes(edit, workspace):
    run(edit, path="code.py", old_str="a = 1\nb = 2\n", new_str="")
    assert (workspace.root / "code.py").read_text() == "c = 1\n"


def test_edit_missing_file_is_an_error(edit):
    assert run(edit, path="missing.py", old_str="a", new_str="b") == (
        {"error": "file not found"},
        True,
    )


def test_edit_outside_workspace_is_refused(edit):
    result, is_error = run(edit, path="/etc/hostname", old_str="a", new_str="b")
    assert is_error and result == {"error": "path is outside the workspace"}


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root server hands files to the owner")
def test_root_server_gives_new_files_to_the_workspace_owner(tmp_path):
    from agent.core.tools import Workspace

    root = tmp_path / "owned"
    root.mkdir()
    os.chown(root, 65534, 65534)
    result, is_error = run(WriteTool(Workspace(root)), path="deep/er/new.txt", content="x")
    assert not is_error, result
    for path in (root / "deep", root / "deep/er", root / "deep/er/new.txt"):
        assert (path.stat().st_uid, path.stat().st_gid) == (65534, 65534), path
