"""Every element the page's script looks up by id, and every hook the server's fragments
address, is described under "Page hooks" in docs/ARCHITECTURE.md."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def page_hooks_section() -> str:
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    start = text.index("## Page hooks")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def test_every_id_the_script_uses_is_documented():
    scripts = ("harness.js", "uploads.js", "conversation_menu.js", "projects.js", "changes.js",
               "git_signins.js")  # fmt: skip
    script = "".join((REPO / "static" / name).read_text() for name in scripts)
    ids = set(re.findall(r"""["']#([a-z][a-z0-9-]*)""", script))
    assert {"composer-alert", "prompt-count", "conversation-gone", "signed-out"} <= ids
    documented = set(re.findall(r"`#([a-z][a-z0-9-]*)", page_hooks_section()))
    assert ids - documented == set()


def test_the_hooks_of_this_round_are_documented_with_their_data():
    section = page_hooks_section()
    for hook in ("`#composer-alert` (`data-code`, `data-outcome`)", "`#prompt-count`",
                 "`#conversation-gone`", "`#signed-out`", "`#help-toggle`",
                 "`#files-body` (`data-path`)", "`#files-changed` (`data-seq`"):  # fmt: skip
        assert hook in section, hook
