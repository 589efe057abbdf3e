"""Vendored static files are the pinned ones, and pages load no third-party script."""

from __future__ import annotations

import hashlib
import re

from tests.conftest import REPO

VENDOR = REPO / "static" / "vendor"


def test_vendored_files_match_their_recorded_checksums():
    record = (VENDOR / "README.md").read_text()
    rows = re.findall(r"\| `([^`]+)` \|[^|]*\|[^|]*\| `([0-9a-f]{64})` \|", record)
    shipped = {p.name for p in VENDOR.iterdir() if p.suffix in (".js", ".css")}
    assert {name for name, _ in rows} == shipped  # every vendored file, and only those
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


def test_the_terminal_stylesheet_is_its_scripts_output_and_agrees_with_the_page():
    """static/terminal.css holds what xterm.js would inject (the CSP refuses it): made by
    scripts/xterm_css.py from the palette static/terminal.js gives xterm.js."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("xterm_css", REPO / "scripts/xterm_css.py")
    xterm_css = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(xterm_css)
    assert (REPO / "static" / "terminal.css").read_text() == xterm_css.css()
    script = (REPO / "static" / "terminal.js").read_text()
    for colour in xterm_css.ANSI:
        assert f'"{colour}"' in script, colour
    assert f"fontSize: {xterm_css.FONT_SIZE}" in script
    assert xterm_css.FONT_FAMILY in script
