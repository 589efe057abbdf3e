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


def test_a_frame_that_ends_one_run_and_starts_the_next_does_not_finish_the_prompt(monkeypatch):
    """A follow-up sent as its prompt's run ended starts a run of its own; one frame (a
    sync's reply, or two runs' batches sent together) then carries the first run's idle,
    the follow-up's prompt and its ``thinking``. The page shows the last status: so must
    the script, or it stops reading before the follow-up's answer (and counts it lost)."""
    import importlib.util
    from types import SimpleNamespace

    from agent.core.events import StatusEvent, UserEvent
    from agent.ui.fragments import render_catch_up

    spec = importlib.util.spec_from_file_location("chaos", REPO / "scripts" / "chaos.py")
    chaos = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "chaos", chaos)  # (its dataclasses look it up)
    spec.loader.exec_module(chaos)
    events = [StatusEvent(state="idle").with_seq(228),
              UserEvent(content="chaos follow-up 1").with_seq(229),
              StatusEvent(state="thinking").with_seq(230)]  # fmt: skip
    html = render_catch_up(events, 227, SimpleNamespace(last_seq=230, id=None, title=""))
    frame = chaos.Frame(html)
    assert frame.parts == [("user", 229)]
    client = chaos.Client(chaos.UserStats("u", "c", "s", last_seq=227), "ws://x", "http://x")
    client.accepted, client.users, client.expected_users = True, 1, 2
    client.apply(228, 230, frame)
    assert client.users == 2 and not client.finished  # the follow-up's answer is to come
