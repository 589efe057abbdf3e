"""Vendored static files are the pinned ones, and pages load no third-party script."""

from __future__ import annotations

import hashlib
import re

from tests.conftest import REPO

VENDOR = REPO / "static" / "vendor"


def test_vendored_files_match_their_recorded_checksums():
    record = (VENDOR / "README.md").read_text()
    rows = re.findall(r"\| `([^`]+)` \|[^|]*\|[^|]*\| `([0-9a-f]{64})` \|", record)
    assert len(rows) == 5
    for name, digest in rows:
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name


def test_templates_load_scripts_only_from_this_origin():
    for template in (REPO / "templates").rglob("*.html"):
        text = template.read_text()
        assert "<script>" not in text.replace('<script id="prompt-history"', ""), template
        assert not re.search(r"<script[^>]+src=\"(https?:)?//", text), template
        assert " on" + "click=" not in text and "style=" not in text, template


def test_the_test_only_axe_core_matches_its_recorded_checksum():
    vendor = REPO / "tests" / "e2e" / "vendor"
    record = (vendor / "README.md").read_text()
    rows = re.findall(r"\| `([^`]+)` \|[^|]*\|[^|]*\| `([0-9a-f]{64})` \|", record)
    assert [name for name, _ in rows] == ["axe-4.14.1.min.js"]
    for name, digest in rows:
        assert hashlib.sha256((vendor / name).read_bytes()).hexdigest() == digest, name
    assert (vendor / "axe-core-LICENSE.txt").read_text().startswith("Mozilla Public License")
