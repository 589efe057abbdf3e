"""The list_dir tool's test matrix: raw `ls -al` output, confined to the workspace."""

from __future__ import annotations

import subprocess

import pytest

from agent.core.tools.search import ListDirTool
from tests.helpers import open_workspace, run, run_unprivileged


@pytest.fixture
def list_dir(workspace):
    (workspace.root / "visible.txt").write_text("v")
    (workspace.root / ".hidden").write_text("h")
    (workspace.root / "sub").mkdir()
    return ListDirTool(workspace)


def test_list_valid_directory_gives_raw_ls_output(list_dir, workspace):
    result, is_error = run(list_dir, path=".")
    assert not is_error and result["entries"].startswith("total ")
    expected = subprocess.run(
        ["ls", "-al", "."], cwd=workspace.root, capture_output=True, text=True,
        env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"},
    ).stdout  # fmt: skip
    assert result["entries"] == expected


def test_list_includes_hidden_files(list_dir):
    entries = run(list_dir, path=".")[0]["entries"]
    assert ".hidden" in entries and "visible.txt" in entries
    assert any(line.startswith("d") and line.endswith(" sub") for line in entries.splitlines())


def test_list_shows_permissions_owner_size_and_name(list_dir):
    line = next(li for li in run(list_dir, path=".")[0]["entries"].splitlines() if "visible" in li)
    assert line.startswith("-rw") and len(line.split()) >= 9


def test_list_subdirectory(list_dir, workspace):
    (workspace.root / "sub" / "inner.txt").write_text("i")
    assert "inner.txt" in run(list_dir, path="sub")[0]["entries"]


def test_list_nonexistent_path_is_an_error(list_dir):
    result, is_error = run(list_dir, path="nonexistent")
    assert is_error and result["error"]


def test_list_file_is_not_a_directory(list_dir):
    assert run(list_dir, path="visible.txt") == ({"error": "not a directory"}, True)


def test_list_outside_workspace_is_refused(list_dir):
    for path in ("/tmp", "/root", "/", ".."):
        result, is_error = run(list_dir, path=path)
        assert is_error and result == {"error": "path is outside the workspace"}, path


def test_list_unreadable_directory_is_permission_denied():
    with open_workspace() as root:
        locked = root / "locked"
        locked.mkdir()
        locked.chmod(0o000)
        result = run_unprivileged(ListDirTool, root, {"path": "locked"})
        assert result == ({"error": "permission denied"}, True)
