"""The grep tool's test matrix: system grep, BRE, case-sensitive, confined."""

from __future__ import annotations

import os

import pytest

from agent.core.tools.search import GrepTool
from tests.helpers import run


@pytest.fixture
def grep(workspace):
    (workspace.root / "test.txt").write_text("alpha\nfoo bar\nFOO upper\nbaz foo\n")
    sub = workspace.root / "sub"
    sub.mkdir()
    (sub / "deep.txt").write_text("nothing\nfoo deep\n")
    return GrepTool(workspace)


def test_grep_single_file_gives_line_number_and_content(grep):
    assert run(grep, pattern="foo", path="test.txt") == (
        {"matches": "2:foo bar\n4:baz foo\n"},
        False,
    )


def test_grep_is_case_sensitive(grep):
    assert "FOO" not in run(grep, pattern="foo", path="test.txt")[0]["matches"]


def test_grep_directory_recursive_gives_filename_line_and_content(grep):
    matches = run(grep, pattern="foo", path=".", recursive=True)[0]["matches"]
    lines = sorted(matches.splitlines())
    assert lines == ["./sub/deep.txt:2:foo deep", "./test.txt:2:foo bar", "./test.txt:4:baz foo"]


def test_grep_recursive_in_subdirectory_names_files_from_the_root(grep):
    assert run(grep, pattern="deep", path="sub", recursive=True)[0] == {
        "matches": "sub/deep.txt:2:foo deep\n"
    }


def test_grep_no_matches_is_success_with_empty_string(grep):
    assert run(grep, pattern="xyz123", path="test.txt") == ({"matches": ""}, False)


def test_grep_uses_basic_regular_expressions(grep):
    # In BRE, `+` is literal and `\{1,\}` is the interval operator.
    assert run(grep, pattern="fo+", path="test.txt")[0]["matches"] == ""
    assert run(grep, pattern=r"fo\{2\}", path="test.txt")[0]["matches"] == "2:foo bar\n4:baz foo\n"


def test_grep_invalid_regex_is_an_error(grep):
    result, is_error = run(grep, pattern="[invalid", path="test.txt")
    assert is_error and "Unmatched" in result["error"]


def test_grep_path_not_found_is_an_error(grep):
    result, is_error = run(grep, pattern="foo", path="nonexistent.txt")
    assert is_error and result == {"error": "file not found"}


def test_grep_directory_without_recursive_is_an_error(grep):
    result, is_error = run(grep, pattern="foo", path="sub")
    assert is_error and "recursive" in result["error"]


def test_grep_outside_workspace_is_refused(grep):
    result, is_error = run(grep, pattern="root", path="/etc/passwd")
    assert is_error and result == {"error": "path is outside the workspace"}


def test_grep_recursive_does_not_follow_symlinks_out_of_the_workspace(grep, workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("foo secret\n")
    os.symlink(outside, workspace.root / "escape")
    matches = run(grep, pattern="secret", path=".", recursive=True)[0]["matches"]
    assert matches == ""


def test_grep_pattern_starting_with_dash_is_a_pattern_not_an_option(grep, workspace):
    (workspace.root / "dash.txt").write_text("a -v flag\n")
    assert run(grep, pattern="-v", path="dash.txt")[0] == {"matches": "1:a -v flag\n"}
