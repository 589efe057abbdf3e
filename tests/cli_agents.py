"""The real CLI agents for tests: installed once from the npm registry, at pinned versions,
into var/cli-agents (a cache kept between runs; `make cli-agents` does the same)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PREFIX = REPO / "var" / "cli-agents"
PACKAGES = (
    "@anthropic-ai/claude-code@2.1.197",
    "@mariozechner/pi-coding-agent@0.73.1",
    "opencode-ai@1.18.33",
)
BINARIES = {"claude-code": "claude", "pi": "pi", "opencode": "opencode"}


def _missing(reason: str):
    if os.environ.get("HARNESS_REQUIRE_SERVICES") == "1":
        pytest.fail(f"the CLI agents are required (HARNESS_REQUIRE_SERVICES=1): {reason}")
    pytest.skip(f"the CLI agents are unavailable: {reason}")


def install_cli_agents() -> dict[str, str]:
    """{agent name: executable}, installing them first when absent."""
    paths = {name: PREFIX / "node_modules" / ".bin" / binary for name, binary in BINARIES.items()}
    if not all(p.exists() for p in paths.values()):
        npm = shutil.which("npm")
        if npm is None:
            _missing("npm is not installed")
        PREFIX.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix",
                               str(PREFIX), *PACKAGES], capture_output=True, text=True,
                              timeout=600)  # fmt: skip
        if done.returncode != 0:
            _missing(f"npm install failed (no registry?): {done.stderr.strip()[-300:]}")
    return {name: str(path) for name, path in paths.items()}
