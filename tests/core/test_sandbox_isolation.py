"""Sandboxes of different users do not starve each other: processes and memory are limited
per workspace (a cgroup per user, one per call below it), not per process or per uid.

The end-to-end tests need root (sandboxes as other uids, cgroups to write) and a host with
pids and memory cgroups: they skip without them, and fail under HARNESS_REQUIRE_SERVICES=1
(CI runs as root). Each uses a cgroup parent of its own, removed afterwards.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import re
import threading
import time
import uuid
from pathlib import Path

import pytest

from agent.core.tools import Workspace
from agent.core.tools.bash import BashTool
from agent.core.tools.cgroup_host import (
    SandboxLimits,
    make_plan,
    parse_mountinfo,
    parse_proc_cgroup,
)
from agent.core.tools.cgroups import SandboxCgroups, sandbox_cgroups, workspace_key
from tests.conftest import require_bwrap, require_service

UID_A, UID_B, UID_C = 231_001, 231_002, 231_003  # used by nothing else on a test host


def require_cgroups(limits: SandboxLimits) -> SandboxCgroups:
    require_bwrap()
    if os.geteuid() != 0:
        require_service("root", "these tests run sandboxes as other uids and write cgroups")
    manager = sandbox_cgroups(limits)
    complete, text = manager.describe(manager.enforced())
    if not complete:
        require_service("pids and memory cgroups", text)
    return manager


@pytest.fixture
def limits():
    """Limits small enough to reach quickly, under a cgroup parent of this test's own."""
    made = []

    def build(pids: int = 48, memory_mb: int = 256) -> SandboxLimits:
        path = f"/harness-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        made.append(SandboxLimits(pids=pids, memory_mb=memory_mb, cgroup_path=path))
        return made[-1]

    yield build
    for each in made:
        sandbox_cgroups(each).remove_all()


def workspace(tmp_path: Path, name: str, uid: int) -> Workspace:
    root = tmp_path / name
    root.mkdir()
    tmp_path.chmod(0o711)  # the sandbox's uid passes through to its own directory only
    os.chown(root, uid, uid)  # what agent/runs/workspaces.py does for a user's workspace
    return Workspace(root)


async def call(tool: BashTool, command: str) -> tuple[dict, bool]:
    result = await tool.execute({"command": command})
    return json.loads(result.content), result.is_error


def processes_of(uid: int) -> list[int]:
    """Live (not zombie) processes of ``uid`` on the host."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        uid_line = re.search(r"^Uid:\s+(\d+)", status, re.M)
        state = re.search(r"^State:\s+(\w)", status, re.M)
        if uid_line and int(uid_line[1]) == uid and state and state[1] != "Z":
            found.append(int(entry.name))
    return found


async def wait_for(path: Path, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        await asyncio.sleep(0.05)


# A process that forks until the limit refuses, then holds them all: Python's fork fails at
# once (bash would retry for seconds).
HOLD = """python3 -c '
import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
open("held", "w").write(str(n))
time.sleep(60)
'"""


@pytest.mark.parametrize("b_uid", [UID_B, UID_A], ids=["another-uid", "the-same-uid"])
def test_one_user_holding_all_their_processes_does_not_break_another_users_bash(
    tmp_path, limits, b_uid
):
    # "the same uid" is what every sandbox had before (all ran as nobody) and still has on a
    # server that is not root: there only a per-workspace count keeps users apart.
    lim = limits(pids=32)
    require_cgroups(lim)
    ws_a, ws_b = workspace(tmp_path, "a", UID_A), workspace(tmp_path, "b", b_uid)
    tool_a = BashTool(ws_a, "sandbox", timeout=20, limits=lim)
    tool_b = BashTool(ws_b, "sandbox", timeout=10, limits=lim)

    async def scenario():
        holder = asyncio.create_task(call(tool_a, HOLD))
        try:
            await wait_for(ws_a.root / "held")
            started = time.monotonic()
            # Processes of its own (a subshell, python): all it runs is not exec'd in place.
            result_b = await call(tool_b, "(echo fine); python3 -c 'print(6 * 7)'; true")
            took = time.monotonic() - started
        finally:
            holder.cancel()
            with pytest.raises(asyncio.CancelledError):
                await holder
        return int((ws_a.root / "held").read_text()), result_b, took

    held, (result, is_error), took = asyncio.run(scenario())
    assert held >= 20  # user A really did hold (close to) their whole limit
    assert held < 32
    assert not is_error, result
    assert result["output"] == "fine\n42\n" and took < 5


def test_memory_is_limited_per_sandbox_not_per_process(tmp_path, limits):
    lim = limits(memory_mb=128)
    manager = require_cgroups(lim)
    tool = BashTool(workspace(tmp_path, "a", UID_A), "sandbox", timeout=20, limits=lim)
    # Three processes of 80 MB each: every one is far below any per-process limit, together
    # they are almost twice the sandbox's.
    grab = "python3 -c 'import time; x = b\"x\" * (80 << 20); time.sleep(1)'"
    command = f"{grab} & {grab} & {grab} & wait; echo done"
    started = time.monotonic()
    result, is_error = asyncio.run(call(tool, command))
    assert is_error, result
    assert "ran out of memory (limit 128 MB" in result["error"]
    assert time.monotonic() - started < 10
    # The host is unaffected: the server goes on allocating and forking, and nothing of the
    # call is left in the cgroup tree.
    assert len(bytearray(256 << 20)) == 256 << 20 and os.system("true") == 0
    assert not any(p.is_dir() for parent in manager.plan().parents.values()
                   for p in parent.iterdir())  # fmt: skip


def test_the_calls_cgroup_is_removed_and_none_of_its_processes_survives(tmp_path, limits):
    lim = limits()
    manager = require_cgroups(lim)
    ws = workspace(tmp_path, "c", UID_C)  # a uid of its own: no other test's processes
    tool = BashTool(ws, "sandbox", timeout=10, limits=lim)
    parents = set(manager.plan().parents.values())
    key = workspace_key(str(ws.root))
    seen: dict[Path, set[int]] = {}

    async def scenario():
        # Processes that try to outlive the call: backgrounded, in a new session, ignoring
        # SIGHUP and SIGTERM.
        command = (
            "(trap '' HUP TERM; setsid sleep 60 &) ; nohup sleep 60 >/dev/null 2>&1 & "
            "sleep 60 & touch started; sleep 1; echo done"
        )
        task = asyncio.create_task(call(tool, command))
        await wait_for(ws.root / "started")
        for parent in parents:
            for run in (parent / key).glob("run-*"):
                seen[run] = {int(p) for p in (run / "cgroup.procs").read_text().split()}
        return await task

    result, is_error = asyncio.run(scenario())
    assert not is_error and result["output"] == "done\n", result
    assert seen, "the call ran in no cgroup of its own"
    assert all(len(pids) >= 3 for pids in seen.values()), seen  # the sleeps were in it
    for run in seen:
        assert not run.exists()
        assert not run.parent.exists()  # the workspace's cgroup goes with its last call
    assert processes_of(UID_C) == []
    for pids in seen.values():
        for pid in pids:
            status = Path(f"/proc/{pid}/status")
            assert not status.exists() or "\nState:\tZ" in status.read_text()


def test_a_fork_bomb_stays_within_the_process_limit(tmp_path, limits):
    # The workspace belongs to root here, like a CLI run in a root-owned directory: no
    # per-uid limit binds root, so only the cgroup can hold the bomb. It doubles for ten
    # generations (about 2,000 processes unchecked) and counts the sandbox's processes with
    # shell builtins only (no fork is left to spare).
    lim = limits(pids=40)
    require_cgroups(lim)
    root = tmp_path / "root-owned"
    root.mkdir()
    tool = BashTool(Workspace(root), "sandbox", timeout=15, limits=lim)
    command = (
        "mkfifo /tmp/clock; exec 3<>/tmp/clock; "
        "bomb() { if [ $1 -lt 10 ]; then bomb $(($1 + 1)) & bomb $(($1 + 1)) & fi; "
        "read -t 3 -u 3; }; bomb 0 2>/dev/null & "
        "most=0; for tick in 1 2 3 4 5 6 7 8 9 10; do read -t 0.1 -u 3; n=0; "
        "for p in /proc/[0-9]*; do n=$((n + 1)); done; "
        "[ $n -gt $most ] && most=$n; done; echo most=$most"
    )
    started = time.monotonic()
    result, _ = asyncio.run(call(tool, command))
    assert time.monotonic() - started < 12
    most = int(re.search(r"most=(\d+)", result["output"])[1])
    assert 10 < most <= 40, result
    assert os.system("true") == 0  # the machine still forks


def test_concurrent_calls_of_one_workspace_share_its_limit_and_each_is_cleaned_up(tmp_path, limits):
    lim = limits(pids=32)
    manager = require_cgroups(lim)
    ws = workspace(tmp_path, "a", UID_A)
    tool = BashTool(ws, "sandbox", timeout=20, limits=lim)

    async def scenario():
        holder = asyncio.create_task(call(tool, HOLD))
        try:
            await wait_for(ws.root / "held")
            second = await call(tool, "echo should-not-start")
        finally:
            holder.cancel()
            with pytest.raises(asyncio.CancelledError):
                await holder
        return second

    result, is_error = asyncio.run(scenario())
    # The user's own second call meets their limit: it is per user, not per call.
    assert is_error and "should-not-start" not in result["output"]
    assert "the process limit was reached (32 processes" in result["error"]
    for parent in manager.plan().parents.values():
        assert list(parent.glob("ws-*")) == []  # the cancelled call was cleaned up too


def test_a_command_that_cannot_join_its_cgroup_does_not_run(tmp_path, limits, monkeypatch):
    lim = limits()
    manager = require_cgroups(lim)
    ws = workspace(tmp_path, "a", UID_A)

    def refuse(self):
        raise OSError(errno.EACCES, "refused")

    monkeypatch.setattr("agent.core.tools.cgroups.RunCgroup.join", refuse)
    tool = BashTool(ws, "sandbox", timeout=10, limits=lim)
    result, is_error = asyncio.run(call(tool, "touch ran.txt"))
    assert is_error and "could not be started" in result["error"]
    assert not (ws.root / "ran.txt").exists()
    for parent in manager.plan().parents.values():
        assert list(parent.glob("ws-*")) == []


# -- Where the cgroups go (no root needed: read-only planning on fixtures) -----------------------

HYBRID_MOUNTINFO = """\
30 24 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
35 30 0:31 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
39 30 0:35 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids
40 30 0:36 / /sys/fs/cgroup/cpu\\040x rw,nosuid - cgroup cgroup rw,cpu,cpuacct
"""
HYBRID_CGROUP = "8:pids:/\n4:memory:/process_api/abc\n1:cpu,cpuacct:/\n0::/\n"


def test_a_hybrid_host_uses_the_v1_pids_and_memory_hierarchies():
    # The cgroup2 mount offers no controllers (they are bound to v1 hierarchies).
    plan = make_plan(SandboxLimits(), HYBRID_MOUNTINFO, HYBRID_CGROUP)
    assert plan.version == 1
    assert plan.parents == {
        "pids": Path("/sys/fs/cgroup/pids/harness"),
        "memory": Path("/sys/fs/cgroup/memory/process_api/abc/harness"),
        "cpu": Path("/sys/fs/cgroup/cpu x/harness"),  # shared fairly, not limited
    }
    configured = make_plan(SandboxLimits(cgroup_path="/sandboxes"), HYBRID_MOUNTINFO,
                           HYBRID_CGROUP)  # fmt: skip
    assert set(configured.parents.values()) == {
        Path("/sys/fs/cgroup/pids/sandboxes"),
        Path("/sys/fs/cgroup/memory/sandboxes"),
        Path("/sys/fs/cgroup/cpu x/sandboxes"),
    }
    assert parse_mountinfo(HYBRID_MOUNTINFO)[-1].point == "/sys/fs/cgroup/cpu x"
    assert parse_proc_cgroup(HYBRID_CGROUP)["cpuacct"] == "/"


def v2_host(tmp_path: Path, own: str, controllers: str = "cpu memory pids") -> tuple[str, str]:
    mountinfo = f"25 1 0:22 / {tmp_path} rw - cgroup2 cgroup2 rw,nsdelegate\n"
    own_dir = tmp_path / own.lstrip("/")
    own_dir.mkdir(parents=True, exist_ok=True)
    for directory in (tmp_path, own_dir, own_dir.parent):
        (directory / "cgroup.controllers").write_text(controllers + "\n")
    return mountinfo, f"0::{own}\n"


def test_v2_uses_the_servers_own_cgroup_only_when_it_is_delegated(tmp_path):
    mountinfo, cgroup = v2_host(tmp_path, "/system.slice/harness.service")
    plan = make_plan(SandboxLimits(), mountinfo, cgroup)
    assert not plan.controllers and "not delegated" in plan.reason
    try:  # what systemd marks a Delegate=yes unit's cgroup with
        os.setxattr(tmp_path / "system.slice/harness.service", "user.delegate", b"1")
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EPERM):
            pytest.skip(f"no user xattrs on {tmp_path}")
        raise
    plan = make_plan(SandboxLimits(), mountinfo, cgroup)
    assert plan.version == 2 and plan.may_move
    assert plan.parents == dict.fromkeys(
        ("pids", "memory", "cpu"), tmp_path / "system.slice/harness.service/harness"
    )
    # After the server moved itself into its leaf, the plan is the same.
    moved = make_plan(SandboxLimits(), mountinfo, "0::/system.slice/harness.service/server\n")
    assert moved.parents == plan.parents


def test_v2_with_a_configured_cgroup_and_without_controllers(tmp_path):
    mountinfo, cgroup = v2_host(tmp_path, "/user.slice/session-1.scope")
    plan = make_plan(SandboxLimits(cgroup_path="/harness"), mountinfo, cgroup)
    assert plan.version == 2 and not plan.may_move
    assert set(plan.parents.values()) == {tmp_path / "harness"}
    assert plan.enable_in == tmp_path
    (tmp_path / "cgroup.controllers").write_text("cpu io\n")
    plan = make_plan(SandboxLimits(cgroup_path="/harness"), mountinfo, cgroup)
    assert not plan.controllers and "no pids or memory controller" in plan.reason
    off = make_plan(SandboxLimits(cgroups="off"), mountinfo, cgroup)
    assert not off.controllers and "off" in off.reason


def test_v2_setup_moves_the_servers_processes_into_a_leaf_when_the_kernel_asks(
    tmp_path, monkeypatch
):
    """v2 refuses controllers for the children of a cgroup that holds processes (EBUSY):
    the server moves them into a leaf first. Simulated on plain files."""
    mountinfo, cgroup = v2_host(tmp_path, "/system.slice/harness.service")
    own = tmp_path / "system.slice/harness.service"
    (own / "cgroup.procs").write_text("101\n102\n")
    paths = {"mountinfo": tmp_path / "mountinfo", "cgroup": tmp_path / "self-cgroup"}
    paths["mountinfo"].write_text(mountinfo)
    paths["cgroup"].write_text(cgroup)
    monkeypatch.setattr("agent.core.tools.cgroup_host.delegated", lambda directory: True)
    writes: list[tuple[str, str]] = []
    busy = threading.Event()

    def write(path: Path, value: str) -> None:
        writes.append((str(path.relative_to(own)), value))
        if path == own / "cgroup.subtree_control" and not busy.is_set():
            busy.set()
            raise OSError(errno.EBUSY, "Device or resource busy")
        path.write_text(value)

    monkeypatch.setattr("agent.core.tools.cgroup_host.write_value", write)
    manager = SandboxCgroups(SandboxLimits(), str(paths["mountinfo"]), str(paths["cgroup"]))
    assert manager.enforced() == {"pids", "memory", "cpu"}
    assert writes == [
        ("cgroup.subtree_control", "+pids +memory +cpu"),  # EBUSY
        ("server/cgroup.procs", "101"),
        ("server/cgroup.procs", "102"),
        ("cgroup.subtree_control", "+pids +memory +cpu"),
        ("harness/cgroup.subtree_control", "+pids +memory +cpu"),
    ]


def test_workspace_cgroup_names_are_plain_and_tell_workspaces_apart(tmp_path):
    (tmp_path / "1").mkdir()
    (tmp_path / "x" / "1").mkdir(parents=True)
    (tmp_path / "odd name!").mkdir()
    first, second = workspace_key(str(tmp_path / "1")), workspace_key(str(tmp_path / "x/1"))
    assert first.startswith("ws-1-") and second.startswith("ws-1-") and first != second
    assert re.fullmatch(r"ws-[0-9a-f]{16}", workspace_key(str(tmp_path / "odd name!")))
