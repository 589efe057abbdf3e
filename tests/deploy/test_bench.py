"""`python manage.py bench` end to end, small: it starts the stamped model and Daphne,
measures every figure and writes the JSON (timings are reported, never asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.bench  # make test-bench
def test_bench_command_measures_every_figure_and_delivers_every_delta(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS_", "DJANGO_"))}
    env["DJANGO_DEBUG"] = "1"
    proc = subprocess.run(
        [sys.executable, "manage.py", "bench", "--levels", "1,3", "--tokens", "15",
         "--idle-sessions", "5", "--idle-prompts", "3", "--burst", "4",
         "--long-events", "40", "--render-tokens", "2000",
         "--project-files", "200", "--project-runs", "2", "--out", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "sessions |  SDK p50" in proc.stdout and "chat page transfer" in proc.stdout
    report = json.loads((tmp_path / "latest.json").read_text())
    for level in report["levels"]:
        assert (
            level["harness"]["delivered"]
            == level["harness"]["expected"]
            == (level["sessions"] * 15)
        )
        assert level["sdk"]["delivered"] == level["sdk"]["expected"]
        assert level["harness"]["errors"] == [] and level["sdk"]["errors"] == []
    assert report["idle_memory"]["sessions"] == 5
    first = report["first_token"]
    assert first["idle"]["harness"]["count"] == first["idle"]["sdk"]["count"] == 3
    assert first["burst"]["harness"]["count"] == first["burst"]["sdk"]["count"] == 4
    assert 0 < first["burst"]["harness"]["p50_ms"] <= first["burst"]["harness"]["p99_ms"]
    assert "first token, 4 prompts sent at once" in proc.stdout
    assert report["render"]["tokens"] == 2000 and report["render"]["ratio"] > 0
    transfer = report["page"]["transfer"]
    assert len(transfer["items"]) >= 6
    assert all("immutable" in i["cache_control"] for i in transfer["items"][1:])
    assert report["page"]["long_conversation"]["events"] == 40
    assert report["projects"]["files"] == 200 and "projects: a worktree of 200" in proc.stdout


@pytest.mark.bench  # make test-bench
def test_bench_only_projects_measures_each_path_this_machine_can(tmp_path):
    """`--only projects`: no server, no model; a checkpoint's, a restore's and a clone's
    figures for each path (the sandboxes need bubblewrap, the broker root), none failed."""
    from bench.projects import modes

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS_", "DJANGO_"))}
    env["DJANGO_DEBUG"] = "1"
    proc = subprocess.run(
        [sys.executable, "manage.py", "bench", "--only", "projects", "--project-files", "300",
         "--project-runs", "3", "--out", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "sessions |  SDK p50" not in proc.stdout  # the streaming section did not run
    report = json.loads((tmp_path / "latest.json").read_text())
    assert "levels" not in report and report["options"]["only"] == "projects"
    projects = report["projects"]
    assert projects["files"] == 300 and projects["plain_clone"]["count"] == 9
    assert projects["plain_clone_checked_out"]["count"] == 9
    assert "clone <= x1.2 a plain `git clone --bare`" in proc.stdout
    for mode in ("core", "oneshot", "host"):
        figures = projects["paths"][mode]
        if mode not in modes():
            assert "skipped" in figures and f"{mode}: " in proc.stdout
            continue
        assert "error" not in figures, figures
        assert figures["after_one_change"]["count"] == 3
        assert 0 < figures["after_one_change"]["p50_ms"] <= figures["after_one_change"]["p99_ms"]
        assert figures["first_ms"] > 0 and figures["restore"]["p50_ms"] > 0
        if mode != "core":  # the product's clone, against the plain one
            assert figures["clone"]["count"] == 9 and figures["clone_ratio"] > 0
            assert f"(x{figures['clone_ratio']} its paired" in proc.stdout
            assert figures["plain_clone"]["count"] == 9  # one before each of the product's
            assert figures["clone_large"]["count"] == figures["plain_clone_large"]["count"] == 9
            assert figures["clone_large_ratio"] > 0
            assert f"(x{figures['clone_large_ratio']} " in proc.stdout
            assert figures["ready"]["p50_ms"] > figures["clone"]["p50_ms"]  # plus the worktree
            assert f"ready to work in {figures['ready']['median_ms']} ms" in proc.stdout


@pytest.mark.bench  # make test-bench
def test_start_cost_measures_the_check_and_the_claim_of_each_prompt():
    """`python -m bench.start_cost`: every timed prompt checked and claimed (it asserts so
    itself), the figures printed as JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS_", "DJANGO_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.start_cost", "--prompts", "12"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert figures["prompts"] == 12
    for step in ("socket_check", "claim"):
        assert figures[step]["cpu_ms_per_prompt"] > 0 and figures[step]["queries_per_prompt"] >= 1
