"""The shell prelude in front of a CLI agent (agent/core/cli_agents/session.py): what the
server sends after "go" reaches the CLI whole, however late the shell gets to the prelude."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from agent.core.cli_agents.session import GO, PRELUDE

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def test_a_prompt_sent_before_the_shell_reads_go_reaches_the_cli(tmp_path):
    """A busy machine: "go" and the first prompt are both waiting when the prelude runs (the
    shell's own `read` took the prompt with the "go" and the CLI waited for ever)."""
    socket, out = str(tmp_path / "tmux.sock"), tmp_path / "received"
    tmux = ["tmux", "-S", socket]
    late = f"sleep 0.5; {PRELUDE}cat > {out}"
    subprocess.run([*tmux, "new-session", "-d", "-s", "cli", "-x", "80", "-y", "24",
                    "bash", "-c", late], check=True)  # fmt: skip
    try:
        subprocess.run([*tmux, "send-keys", "-t", "cli", *GO], check=True)
        subprocess.run([*tmux, "load-buffer", "-b", "prompt", "-"], input=b'{"prompt": 1}\n',
                       check=True)  # fmt: skip
        subprocess.run([*tmux, "paste-buffer", "-d", "-r", "-b", "prompt", "-t", "cli"],
                       check=True)  # fmt: skip
        deadline = time.monotonic() + 10
        while not (out.exists() and out.read_bytes().endswith(b"\n")):
            assert time.monotonic() < deadline, (
                f"the CLI got {out.read_bytes() if out.exists() else None!r}"
            )
            time.sleep(0.05)
        assert out.read_bytes() == b'{"prompt": 1}\n'
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
