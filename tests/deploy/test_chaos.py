"""The load-and-chaos script at small scale: random mid-run disconnects lose nothing and
duplicate nothing, with follow-ups queued on running prompts and tool calls waiting for
approval in the mix."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO


def test_chaos_script_reports_no_lost_and_no_duplicated_events(tmp_path):
    out = tmp_path / "chaos.json"
    proc = subprocess.run(
        [sys.executable, "scripts/chaos.py", "--spawn", "--users", "8", "--prompts", "2",
         "--drop-rate", "0.7", "--follow-up-rate", "0.5", "--approval-rate", "0.5",
         "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    summary = json.loads(out.read_text())["summary"]
    assert summary["users"] == 8 and summary["prompts_completed"] == 16
    assert summary["lost"] == 0 and summary["duplicated"] == 0 and summary["errors"] == 0
    assert summary["disconnects"] > 0  # the chaos really happened
    assert summary["follow_ups"] > 0
    assert summary["approvals"] > 0  # tool calls waited for approval and were approved
    # each prompt and follow-up: its user part and its answer
    assert summary["delivered"] == (8 * 2 + summary["follow_ups"]) * 2
