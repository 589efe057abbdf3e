"""Every environment variable the settings read is in docs/CONFIGURATION.md, so an
operator never has to read settings.py to learn a knob exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_setting_read_from_the_environment_is_documented():
    settings = (ROOT / "harness_site" / "settings.py").read_text()
    names = set(re.findall(r'\benv_[a-z]+\(\s*"([A-Z][A-Z0-9_]+)"', settings))
    assert len(names) > 50  # the pattern still finds how settings.py reads them
    documented = set(
        re.findall(r"`([A-Z][A-Z0-9_]+)`", (ROOT / "docs" / "CONFIGURATION.md").read_text())
    )
    assert sorted(names - documented) == []
