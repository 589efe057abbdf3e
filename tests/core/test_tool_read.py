"""The read tool's test matrix and limits, inside a confined workspace."""

from __future__ import annotations

import os

import pytest

from agent.core.tools.files import ReadTool
from tests.helpers import open_workspace, run, run_unprivileged


@pytest.fixture
def read(workspace):
    (workspace.root / "test.txt").write_text("line1\nline2\nline3")
    return ReadTool(workspace)


def test_read_entire_file(read):
    assert run(read, path="test.txt") == ({"content": "line1\nline2\nline3"}, False)


def test_read_with_start_line_only_returns_lines_to_end(read):
    assert run(read, path="test.txt", start_line=2) == ({"content": "line2\nline3"}, False)


def test_read_with_end_line_only_returns_first_lines(read):
    assert run(read, path="test.txt", end_line=2) == ({"content": "line1\nline2"}, False)


def test_read_specific_range_is_inclusive(read):
    assert run(read, path="test.txt", start_line=2, end_line=3) == (
        {"content": "line2\nline3"},
        False,
    )


def test_read_single_line_range(read):
    assert run(read, path="test.txt", start_line=2, end_line=2) == ({"content": "line2"}, False)


def test_read_missing_file_is_file_not_found(read):
    assert run(read, path="nonexistent.txt") == ({"error": "file not found"}, True)


def test_read_directory_is_refused(read, workspace):
    (workspace.root / "sub").mkdir()
    assert run(read, path="sub") == ({"error": "path is a directory"}, True)


def test_read_outside_directory_like_tmp_is_refused(read):
    result, is_error = run(read, path="/tmp")
    assert is_error and result == {"error": "path is outside the workspace"}


def test_read_etc_shadow_is_refused(read):
    result, is_error = run(read, path="/etc/shadow")
    assert is_error and "content" not in result


def test_read_unreadable_file_is_permission_denied():
    with open_workspace() as root:
        secret = root / "secret.txt"
        secret.write_text("top secret")
        secret.chmod(0o000)
        result = run_unprivileged(ReadTool, root, {"path": "secret.txt"})
        assert result == ({"error": "permission denied"}, True)


@pytest.mark.parametrize(
    "params",
    [
        {"start_line": 0},
        {"start_line": -3},
        {"end_line": 0},
        {"start_line": 5, "end_line": 2},
        {"start_line": 9999},
        {"start_line": "2"},
    ],
)
def test_read_invalid_line_numbers_are_errors(read, params):
    result, is_error = run(read, path="test.txt", **params)
    assert is_error and set(result) == {"error"} and result["error"]


def test_read_missing_path_parameter_is_an_error(read):
    result, is_error = run(read)
    assert is_error and "path" in result["error"]


def test_read_absolute_path_inside_workspace_works(read, workspace):
    path = str(workspace.root / "test.txt")
    assert run(read, path=path)[0] == {"content": "line1\nline2\nline3"}


def test_read_refuses_binary_files(read, workspace):
    (workspace.root / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02")
    result, is_error = run(read, path="blob.bin")
    assert is_error and "binary" in result["error"]


def test_read_refuses_files_over_one_megabyte_without_a_range(read, workspace):
    (workspace.root / "big.txt").write_text("x" * 80 + "\n" * 1 + ("y" * 99 + "\n") * 11_000)
    result, is_error = run(read, path="big.txt")
    assert is_error and "1 MB" in result["error"]


def test_read_line_range_of_a_large_file_works(read, workspace):
    (workspace.root / "big.txt").write_text("".join(f"row {i}\n" for i in range(1, 300_001)))
    assert run(read, path="big.txt", start_line=250_000, end_line=250_001) == (
        {"content": "row 250000\nrow 250001"},
        False,
    )


def test_read_through_symlink_leaving_workspace_is_refused(read, workspace, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("host secret")
    os.symlink(outside, workspace.root / "link.txt")
    result, is_error = run(read, path="link.txt")
    assert is_error and result == {"error": "path is outside the workspace"}


def test_read_through_symlink_inside_workspace_works(read, workspace):
    os.symlink("test.txt", workspace.root / "alias.txt")
    assert run(read, path="alias.txt")[0] == {"content": "line1\nline2\nline3"}


def test_read_refuses_a_hard_link(read, workspace, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("host secret")
    os.link(outside, workspace.root / "hard.txt")
    result, is_error = run(read, path="hard.txt")
    assert is_error and "hard link" in result["error"]


def test_read_non_utf8_text_is_replaced_not_crashing(read, workspace):
    (workspace.root / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    result, is_error = run(read, path="latin1.txt")
    assert not is_error and result["content"].startswith("caf")


def test_a_directory_swapped_for_a_symlink_is_refused(read, workspace, tmp_path):
    """`sub` has become a symlink to a directory outside: the walk from the root's
    descriptor meets the link and refuses it (the race itself: tests/core/test_file_races.py)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host secret")
    os.symlink(outside, workspace.root / "sub")  # the state at open time
    result, is_error = run(read, path="sub/secret.txt")
    assert is_error and result == {"error": "path is outside the workspace"}
