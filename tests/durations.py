"""The test files' measured durations, so that a parallel run starts the longest first.

pytest-xdist hands each worker a whole file at a time (``--dist loadfile``). Handed out
in the order of their number of tests (xdist's default), the files with few but slow tests
(a race, a killed server, a browser session) came last, and a run ended with one or two
workers busy and the rest idle. Handed out longest first, the workers finish together.

``tests/durations.json`` holds each file's seconds (setup, calls and teardown), measured by
``make test-durations``; a file missing from it, new since, counts as ``UNKNOWN`` seconds.
Stale figures cost only speed, never a test."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

FILE = Path(__file__).with_name("durations.json")
UNKNOWN = 10.0  # seconds: a new file goes before the many quick ones


def load() -> dict[str, float]:
    try:
        return json.loads(FILE.read_text())
    except (OSError, ValueError):
        return {}


def longest_first(items: list, durations: dict[str, float]) -> None:
    """Sorts ``items`` in place by their file's duration, longest first; a file's tests
    keep their order."""
    items.sort(key=lambda item: -durations.get(item.nodeid.split("::")[0], UNKNOWN))


def from_junit(report: Path) -> dict[str, float]:
    """Each test file's seconds in a JUnit XML report (pytest's ``--junitxml`` with
    ``-o junit_family=xunit1``, which names each test's file)."""
    seconds: Counter[str] = Counter()
    for case in ET.parse(report).iter("testcase"):
        if case.get("file"):
            seconds[case.get("file")] += float(case.get("time") or 0)
    return {name: round(value, 1) for name, value in sorted(seconds.items())}


if __name__ == "__main__":  # python -m tests.durations REPORT.xml: rewrites durations.json
    FILE.write_text(json.dumps(from_junit(Path(sys.argv[1])), indent=1) + "\n")
