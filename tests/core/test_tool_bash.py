"""bash: sandboxed by default (bubblewrap), with timeout, output cap and limits."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

from agent.core.tools import build_tools
from agent.core.tools.bash import BashTool
from tests.conftest import require_bwrap
from tests.helpers import NOBODY, open_workspace, run


@pytest.fixture
def sandbox(workspace):
    require_bwrap()
    return BashTool(workspace, "sandbox", timeout=10)


def test_bash_runs_a_command_in_the_workspace(sandbox, workspace):
    (workspace.root / "hello.txt").write_text("hi\n")
    result, is_error = run(sandbox, command="pwd; cat hello.txt; echo out; echo err >&2")
    assert not is_error and result["exit_code"] == 0
    assert result["output"] == "/workspace\nhi\nout\nerr\n"


def test_bash_can_write_to_the_workspace(sandbox, workspace):
    run(sandbox, command="mkdir -p build && echo made > build/out.txt")
    assert (workspace.root / "build/out.txt").read_text() == "made\n"


def test_bash_non_zero_exit_is_an_error(sandbox):
    result, is_error = run(sandbox, command="echo failing; exit 3")
    assert is_error and result["exit_code"] == 3 and result["output"] == "failing\n"
    assert "status 3" in result["error"]


def test_bash_cannot_read_etc_shadow(sandbox):
    result, is_error = run(sandbox, command="cat /etc/shadow")
    assert is_error and "No such file" in result["output"]


def test_bash_sees_no_host_home_var_or_other_workspaces(sandbox, workspace):
    result, _ = run(sandbox, command="ls -a / ; ls /root /home /var /work 2>&1; true")
    top = set(result["output"].split("\n\n")[0].split())
    assert {"root", "home", "var", "work"}.isdisjoint(top)
    assert str(workspace.root.parent) not in result["output"]


def test_bash_cannot_write_outside_the_workspace(sandbox):
    result, is_error = run(sandbox, command="touch /usr/planted 2>&1 || echo refused")
    assert "refused" in result["output"] and not os.path.exists("/usr/planted")


def test_bash_environment_has_no_server_secrets(sandbox, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-value")
    monkeypatch.setenv("DJANGO_SECRET_KEY", "django-secret-value")
    result, _ = run(sandbox, command="env; cat /proc/1/environ | tr '\\0' '\\n'")
    assert "secret-value" not in result["output"]
    assert "ANTHROPIC" not in result["output"]


def test_bash_has_no_network(sandbox):
    # Only a loopback interface of its own: the host's interfaces are not there.
    result, _ = run(sandbox, command="tail -n +3 /proc/net/dev | cut -d: -f1")
    assert result["output"].split() == ["lo"]
    # The host's PostgreSQL on 127.0.0.1 is not reachable from the sandbox's loopback.
    py = "import socket; socket.create_connection(('127.0.0.1', 5432), timeout=2)"
    result, is_error = run(sandbox, command=f'python3 -c "{py}"')
    assert is_error and ("unreachable" in result["output"] or "refused" in result["output"])


def test_bash_timeout_kills_the_command(workspace):
    require_bwrap()
    tool = BashTool(workspace, "sandbox", timeout=1)
    started = time.monotonic()
    result, is_error = run(tool, command="echo started; while true; do :; done")
    assert is_error and "timed out" in result["error"] and result["output"] == "started\n"
    assert time.monotonic() - started < 5


def test_bash_huge_output_is_capped_head_and_tail(workspace):
    require_bwrap()
    # A gigabyte through a pipe takes seconds of CPU: on a loaded machine more than the
    # other tests' 10 s timeout, which is not what this test is about.
    tool = BashTool(workspace, "sandbox", timeout=60)
    result, is_error = run(tool, command="head -c 1000000000 /dev/zero | tr '\\0' 'x'; echo END")
    assert not is_error
    assert len(result["output"]) < 101_000 and result["output"].rstrip().endswith("END")
    assert "bytes of output omitted" in result["output"]


def test_bash_background_processes_do_not_outlive_the_call(sandbox, workspace):
    started = time.monotonic()
    result, is_error = run(sandbox, command="(sleep 30; touch late.txt) & echo spawned")
    assert not is_error and time.monotonic() - started < 5
    time.sleep(0.5)
    assert not (workspace.root / "late.txt").exists()


def test_bash_fork_bomb_is_contained():
    require_bwrap()
    with open_workspace() as root:
        if os.geteuid() == 0:
            os.chown(root, NOBODY, NOBODY)  # a root server runs the sandbox as the owner
        from agent.core.tools import Workspace

        tool = BashTool(Workspace(root), "sandbox", timeout=5)
        bomb = "bomb() { bomb | bomb & }; bomb; sleep 1; echo survived"
        started = time.monotonic()
        result, _ = run(tool, command=bomb)
        assert time.monotonic() - started < 15
        assert "Resource temporarily unavailable" in result["output"] or result.get("error")
    # the machine still forks fine
    assert os.system("true") == 0


def test_bash_memory_limit_stops_a_huge_allocation(sandbox):
    result, is_error = run(sandbox, command="python3 -c 'x = bytearray(8 * 1024**3)'")
    assert is_error and "MemoryError" in result["output"]


def test_bash_cancel_kills_the_process_group(sandbox, workspace):
    async def scenario():
        task = asyncio.create_task(sandbox.execute({"command": "sleep 30; touch done.txt"}))
        await asyncio.sleep(0.5)
        task.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 1.0
    time.sleep(0.3)
    assert not (workspace.root / "done.txt").exists()


def test_bash_without_bwrap_says_so_instead_of_running_unsandboxed(workspace, monkeypatch):
    monkeypatch.setattr("agent.core.tools.bash.bwrap_path", lambda: None)
    result, is_error = run(BashTool(workspace, "sandbox"), command="touch ran.txt")
    assert is_error and "bubblewrap" in result["error"]
    assert not (workspace.root / "ran.txt").exists()


def test_bash_off_mode_registers_no_bash_tool(workspace):
    assert "bash" not in [t.name for t in build_tools(workspace, "off")]
    assert "bash" in [t.name for t in build_tools(workspace, "sandbox")]


def test_bash_unsafe_mode_runs_directly_on_the_host(workspace):
    result, is_error = run(BashTool(workspace, "unsafe", timeout=10), command="pwd")
    assert not is_error and result["output"].strip() == str(workspace.root)


def test_bash_result_carries_display_data(sandbox):
    result = asyncio.run(sandbox.execute({"command": "exit 2"}))
    assert result.display == {
        "kind": "bash",
        "exit_code": 2,
        "timed_out": False,
        "truncated": False,
    }
    assert json.loads(result.content)["exit_code"] == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="the privileged bwrap mode is for root servers")
def test_root_server_runs_the_command_as_the_workspace_owner_behind_private_dirs(tmp_path):
    require_bwrap()
    from agent.core.tools import Workspace

    hidden = tmp_path / "private"
    hidden.mkdir(mode=0o700)  # the sandbox user could not walk this path itself
    root = hidden / "ws"
    root.mkdir()
    os.chown(root, NOBODY, NOBODY)
    tool = BashTool(Workspace(root), "sandbox", timeout=10)
    result, is_error = run(
        tool, command="id -u; touch made.txt; cat /proc/self/status | grep NoNewPrivs"
    )
    assert not is_error, result
    lines = result["output"].split()
    assert lines[0] == str(NOBODY) and "NoNewPrivs:" in lines and lines[-1] == "1"
    assert (root / "made.txt").stat().st_uid == NOBODY


def test_bash_cannot_reach_other_workspaces_or_the_database(tmp_path):
    require_bwrap()
    from agent.core.tools import Workspace

    workspaces = tmp_path / "workspaces"
    mine, theirs = workspaces / "1", workspaces / "2"
    for path in (mine, theirs):
        path.mkdir(parents=True)
    (theirs / "secret.txt").write_text("their secret")
    database = tmp_path / "db.sqlite3"
    database.write_text("SQLite format 3 ... rows")
    tool = BashTool(Workspace(mine), "sandbox", timeout=10)
    command = (
        f"cat {theirs}/secret.txt {database} ../2/secret.txt /workspace/../2/secret.txt 2>&1; "
        "ls / ; ls /workspace/.. ; true"
    )
    result, _ = run(tool, command=command)
    assert "their secret" not in result["output"] and "SQLite" not in result["output"]
    assert "No such file" in result["output"]
