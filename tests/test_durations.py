"""The order a parallel run hands out its test files in (tests/durations.py)."""

from __future__ import annotations

from types import SimpleNamespace

from tests import durations


def _items(*nodeids: str) -> list:
    return [SimpleNamespace(nodeid=nodeid) for nodeid in nodeids]


def test_the_longest_files_go_first_and_each_files_tests_keep_their_order():
    items = _items("a.py::one", "b.py::one", "c.py::one", "a.py::two", "b.py::two")
    durations.longest_first(items, {"a.py": 1.0, "b.py": 30.0})
    # c.py is new: it counts as UNKNOWN seconds, between the two
    assert [item.nodeid for item in items] == [
        "b.py::one", "b.py::two", "c.py::one", "a.py::one", "a.py::two",
    ]  # fmt: skip


def test_a_junit_report_gives_each_files_seconds(tmp_path):
    report = tmp_path / "report.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase file="tests/x.py" name="a" time="1.25"/>'
        '<testcase file="tests/x.py" name="b" time="2.5"/>'
        '<testcase file="tests/y.py" name="c" time="0.5"/>'
        "</testsuite></testsuites>"
    )
    assert durations.from_junit(report) == {"tests/x.py": 3.8, "tests/y.py": 0.5}


def test_every_file_measured_is_a_test_file_here():
    """A renamed or deleted test file's figure goes with it (``make test-durations``, or by
    hand): figures for files that are not here mean they were measured on another tree."""
    root = durations.FILE.parent.parent
    assert [name for name in durations.load() if not (root / name).is_file()] == []
