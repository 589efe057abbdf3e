"""The real CLI agents for tests: installed once from the npm registry, at pinned versions,
into var/cli-agents (a cache kept between runs; `make cli-agents` does the same)."""

from __future__ import annotations

import contextlib
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
    "@openai/codex@0.171.0",
)
BINARIES = {"claude-code": "claude", "pi": "pi", "opencode": "opencode", "codex": "codex"}


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


@contextlib.contextmanager
def cli_live_server(root: Path, model_url: str, api_key: str, **environ: str):
    """A live server with the real CLI agents, the model behind ``model_url`` reached
    through the deployment's gateway with ``api_key``, and "alice" signed up; its tmux
    server ends with it."""
    from testkit.live import LiveServer
    from tests.conftest import require_bwrap

    require_bwrap()
    if shutil.which("tmux") is None:
        _missing("tmux is not installed")
    clis = install_cli_agents()
    commands = {f"HARNESS_AGENT_{name.upper().replace('-', '_')}_COMMAND": path
                for name, path in clis.items()}  # fmt: skip
    server = LiveServer(root, ANTHROPIC_API_KEY=api_key, ANTHROPIC_BASE_URL=model_url,
                        HARNESS_AGENT_STATE=str(root / "cli"), **commands, **environ)  # fmt: skip
    server.start()
    server.create_users("alice")
    server.socket = str(root / "cli" / "tmux.sock")
    try:
        yield server
    finally:
        server.stop()
        subprocess.run(["tmux", "-S", server.socket, "kill-server"], capture_output=True)
