"""cgroups for the bash sandbox: process and memory limits on a sandbox as a whole.

rlimits are per process (RLIMIT_AS) or per uid (RLIMIT_NPROC): three processes of 3.9 GB
each pass a 4 GB address-space limit, and every sandbox running as one uid shares one
process limit. A cgroup counts every process put in it, whatever its uid, and its memory
together, so the limits here are per workspace (one per user) and hold whatever uid the
sandbox runs as:

    <parent>/                     <server's own cgroup>/harness, or HARNESS_CGROUP
      ws-<name>/                  pids.max, memory limit (no swap): shared by that
                                  workspace's concurrent bash calls, so one user's calls
                                  cannot starve another user's
        run-<server pid>-<n>/     one bash call: its processes join before exec; when the
                                  call ends, all of them are killed and the cgroup removed

cgroup v2 (one hierarchy): the parent lives in a subtree the server may write: a configured
cgroup (HARNESS_CGROUP), or the server's own cgroup when it is delegated (systemd
``Delegate=yes``) or is the root of its cgroup namespace. v2 allows processes only in leaves
("no internal processes"), so before enabling controllers for its children the server moves
the processes of its own cgroup into a leaf, ``server``. cgroup v1: the pids and memory
hierarchies, the same layout in each. Neither usable: the caller falls back to rlimits.

No Django here: the limits come in a ``SandboxLimits`` built by the Django side.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import itertools
import logging
import os
import re
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from agent.core.tools import cgroup_host as host
from agent.core.tools.cgroup_host import (
    ALL,
    MOUNTINFO,
    PROC_CGROUP,
    SERVER_LEAF,
    CgroupError,
    Plan,
    SandboxLimits,
    make_plan,
)
from agent.core.tools.cgroup_run import RunCgroup, RunStats

log = logging.getLogger(__name__)

RELEASE_SECONDS = 3.0  # how long a finished call's cgroup may take to empty


def workspace_key(root: str) -> str:
    """The workspace's cgroup name: its directory's name when that is plain (a server
    workspace is named by the user's id) and a digest of its real path, which tells apart
    workspaces of the same name and is the same across server processes."""
    real = os.path.realpath(root)
    digest = hashlib.sha256(real.encode()).hexdigest()
    name = os.path.basename(real)
    if re.fullmatch(r"[A-Za-z0-9_-]{1,24}", name):
        return f"ws-{name}-{digest[:8]}"
    return f"ws-{digest[:16]}"


class SandboxCgroups:
    """Sets up and tears down the sandbox cgroups of one server process. Every method but
    ``release`` blocks (file system calls on cgroupfs): call them in a thread."""

    def __init__(self, limits: SandboxLimits, mountinfo: str = MOUNTINFO,
                 proc_cgroup: str = PROC_CGROUP):  # fmt: skip
        self.limits = limits
        self._sources = (mountinfo, proc_cgroup)
        self._lock = threading.Lock()  # structure changes of this process, one at a time
        self._plan: Plan | None = None
        self._ready: bool | None = None
        self._logged: set[str] = set()
        self._names = itertools.count(1)

    # What is available

    def plan(self) -> Plan:
        """Where the cgroups would go (read-only: nothing is created)."""
        if self._plan is None:
            try:
                texts = [host.read_text(Path(p)) for p in self._sources]
            except OSError as exc:
                self._plan = Plan(reason=f"cannot read {exc.filename} ({exc.strerror})")
            else:
                self._plan = make_plan(self.limits, *texts)
        return self._plan

    def setup(self) -> Plan:
        """Make the cgroups usable, once (v2: enable the controllers below the parent,
        moving the server into a leaf if need be). A failure leaves rlimits only."""
        with self._lock:
            if self._ready is None:
                plan = self.plan()
                try:
                    if plan.controllers:
                        self._enable(plan)
                        self._sweep(plan)
                    self._ready = bool(plan.controllers)
                except OSError as exc:
                    plan.reason = f"cannot set up cgroups at {plan.where()}: {exc}"
                    plan.parents = {}
                    self._ready = False
                self.log_status()
        return self.plan()

    def enforced(self) -> frozenset[str]:
        return self.setup().controllers

    def describe(self, controllers: Iterable[str] | None = None) -> tuple[bool, str]:
        """(all limits bind per sandbox, what is and is not enforced), for the log."""
        plan = self.plan()
        have = frozenset(controllers if controllers is not None else plan.controllers)
        lim = self.limits
        done, not_done = [], []
        if "pids" in have:
            done.append(f"{lim.pids} processes per workspace (cgroup pids.max)")
        else:
            not_done.append(
                f"processes are limited only per uid (RLIMIT_NPROC {lim.pids}), not per sandbox"
            )
        if "memory" in have:
            done.append(f"{lim.memory_mb} MB of memory per workspace, no swap (cgroup)")
        else:
            not_done.append(
                f"memory is limited only per process (RLIMIT_AS); HARNESS_SANDBOX_MEMORY_MB "
                f"({lim.memory_mb}) is not enforced"
            )
        if "cpu" in have:
            done.append("CPU shared equally between workspaces (cgroup cpu)")
        text = "; ".join(done + not_done)
        if have:
            text = f"cgroup v{plan.version} at {plan.where()}: {text}"
        if not_done and plan.reason:
            text += f" ({plan.reason})"
        return not not_done, text

    def log_status(self, verified: bool = True) -> None:
        """Log what binds, once per process and outcome. Before set-up (``verified``
        False) only what will not bind: what will is said once set-up has made it so."""
        complete, text = self.describe()
        if text in self._logged or (complete and not verified):
            return
        self._logged.add(text)
        if complete:
            log.info("bash sandbox limits: %s", text)
        else:
            log.warning("bash sandbox limits: %s. See docs/DEPLOY.md (cgroups).", text)

    # One call

    def open_run(self, root: str) -> RunCgroup | None:
        """Make the cgroup of one bash call in workspace ``root`` (and its workspace's, with
        the limits); None when cgroups are not in use. Blocking."""
        plan = self.setup()
        if not plan.controllers:
            return None
        key = workspace_key(root)
        name = f"run-{os.getpid()}-{next(self._names)}"
        for _attempt in range(5):
            try:
                with self._lock:
                    return self._open_run(plan, key, name)
            except FileNotFoundError:
                # Another server process removed an empty parent or workspace cgroup
                # between our mkdir and the next step: make them again.
                continue
        raise CgroupError(errno.ENOENT, f"the cgroup of workspace {key} keeps disappearing")

    def _open_run(self, plan: Plan, key: str, name: str) -> RunCgroup:
        runs: dict[str, Path] = {}
        fds: list[int] = []
        pids_before = 0
        made: list[Path] = []
        try:
            for parent in sorted(set(plan.parents.values())):
                controllers = [c for c in ALL if plan.parents.get(c) == parent]
                self._ensure_parent(plan, parent)
                workspace = parent / key
                with contextlib.suppress(FileExistsError):
                    workspace.mkdir()
                if plan.version == 2:
                    host.write_value(
                        workspace / "cgroup.subtree_control", host.enable_text(controllers)
                    )
                self._set_limits(plan.version, workspace, controllers)
                if "pids" in controllers:
                    pids_before = host.keyed(workspace / "pids.events", "max")
                run = workspace / name
                run.mkdir()
                made.append(run)
                if plan.version == 2 and "memory" in controllers:
                    # On an out-of-memory kill, kill the whole call, not one of its
                    # processes: a half-killed command leaves confusing output.
                    with contextlib.suppress(OSError):
                        host.write_value(run / "memory.oom.group", "1")
                for controller in controllers:
                    runs[controller] = run
                fds.append(os.open(run / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
        except BaseException:
            for fd in fds:
                os.close(fd)
            for run in made:
                with contextlib.suppress(OSError):
                    run.rmdir()
            raise
        return RunCgroup(plan.version, runs, fds, pids_before)

    async def release(self, run: RunCgroup) -> RunStats:
        """After the call: read what happened, kill what is left, remove its cgroups.
        Never blocks the event loop: the retries wait with asyncio.sleep."""
        run.close_fds()
        stats, done = await asyncio.to_thread(self._finish, run)
        delay, waited = 0.005, 0.0
        while not done:
            if waited >= RELEASE_SECONDS:
                log.warning("bash sandbox: cgroup %s did not empty; left in place", run.dirs)
                break
            await asyncio.sleep(delay)
            waited += delay
            delay = min(delay * 2, 0.1)
            done = await asyncio.to_thread(self._kill_and_remove, run)
        return stats

    def release_sync(self, run: RunCgroup) -> RunStats:
        """``release`` for a caller with no event loop (the broker's threads)."""
        run.close_fds()
        stats, done = self._finish(run)
        delay, waited = 0.005, 0.0
        while not done and waited < RELEASE_SECONDS:
            time.sleep(delay)
            waited += delay
            delay = min(delay * 2, 0.1)
            done = self._kill_and_remove(run)
        if not done:
            log.warning("bash sandbox: cgroup %s did not empty; left in place", run.dirs)
        return stats

    def _finish(self, run: RunCgroup) -> tuple[RunStats, bool]:
        return run.stats(), self._kill_and_remove(run)  # the stats before the cgroups go

    def _kill_and_remove(self, run: RunCgroup) -> bool:
        run.kill()
        with self._lock:
            if not run.remove():
                return False
            self._prune(run)
        return True

    # Structure

    def _enable(self, plan: Plan) -> None:
        """v2: let the parent's children have the controllers: ``enable_in`` lists them in
        its subtree_control, which v2 allows only while it holds no process (but at the
        root). A parent below the server's own cgroup gets there by moving those
        processes into a leaf. v1: check that the parent can be made."""
        if plan.version == 1:
            for parent in set(plan.parents.values()):
                self._ensure_parent(plan, parent)
            return
        assert plan.enable_in is not None
        text = host.enable_text(plan.parents)
        try:
            host.write_value(plan.enable_in / "cgroup.subtree_control", text)
        except OSError as exc:
            if exc.errno != errno.EBUSY or not plan.may_move:
                raise
            leaf = plan.enable_in / SERVER_LEAF
            with contextlib.suppress(FileExistsError):
                leaf.mkdir()
            for pid in host.read_text(plan.enable_in / "cgroup.procs").split():
                with contextlib.suppress(ProcessLookupError):
                    host.write_value(leaf / "cgroup.procs", pid)
            host.write_value(plan.enable_in / "cgroup.subtree_control", text)
            log.info("bash sandbox: moved the server's processes into %s (cgroup v2)", leaf)
        self._ensure_parent(plan, next(iter(plan.parents.values())))

    def _ensure_parent(self, plan: Plan, parent: Path) -> None:
        try:
            parent.mkdir()
        except FileExistsError:
            pass
        except FileNotFoundError:
            # A configured v1 path is made whole; on v2 every level would need the
            # controllers enabled, so its parent must exist (and offer them).
            if plan.own_parent or plan.version == 2:
                raise
            parent.mkdir(parents=True, exist_ok=True)
        if plan.version == 2:
            host.write_value(parent / "cgroup.subtree_control", host.enable_text(plan.parents))
        elif "memory" in plan.parents and plan.parents["memory"] == parent:
            # Old v1 kernels count a child's memory in its parent only with this on (new
            # ones always do and refuse the write).
            with contextlib.suppress(OSError):
                if host.read_text(parent / "memory.use_hierarchy").strip() == "0":
                    host.write_value(parent / "memory.use_hierarchy", "1")

    def _set_limits(self, version: int, workspace: Path, controllers: list[str]) -> None:
        limit = self.limits.memory_mb * 1024**2
        if "pids" in controllers:
            host.write_if_changed(workspace / "pids.max", str(self.limits.pids))
        if "memory" not in controllers:
            return
        if version == 2:
            host.write_if_changed(workspace / "memory.max", str(limit))
            # Without this the limit only pushes the sandbox's memory into swap.
            if (workspace / "memory.swap.max").exists():
                host.write_if_changed(workspace / "memory.swap.max", "0")
            return
        # v1: memory+swap may not be below memory, so the order depends on the direction.
        memsw = workspace / "memory.memsw.limit_in_bytes"
        current = int(host.read_text(workspace / "memory.limit_in_bytes"))
        order = [workspace / "memory.limit_in_bytes", memsw]
        if limit > current:
            order.reverse()
        for path in order:
            if path.exists():
                host.write_if_changed(path, str(limit))

    def _sweep(self, plan: Plan) -> None:
        """Remove call cgroups that a dead server process left (it crashed mid-call)."""
        for parent in set(plan.parents.values()):
            with contextlib.suppress(OSError):
                for workspace in parent.iterdir():
                    if not workspace.is_dir() or not workspace.name.startswith("ws-"):
                        continue
                    for run in workspace.iterdir():
                        match = re.fullmatch(r"run-(\d+)-\d+", run.name)
                        if match and not host.alive(int(match[1])):
                            stale = RunCgroup(plan.version, {"": run}, [], 0)
                            stale.kill()
                            with contextlib.suppress(OSError):
                                stale.remove()
                    with contextlib.suppress(OSError):
                        workspace.rmdir()

    def _prune(self, run: RunCgroup) -> None:
        """Remove the workspace's cgroup when no call uses it any more, and the parent when
        it is ours and empty: nothing of ours stays in the host's cgroup tree."""
        plan = self.plan()
        for directory in run.dirs:
            workspace = directory.parent
            try:
                workspace.rmdir()
            except OSError:
                continue  # another call of this workspace runs (or the kernel is busy)
            if plan.own_parent:
                with contextlib.suppress(OSError):
                    workspace.parent.rmdir()

    def remove_all(self) -> None:
        """Remove the parent and everything under it (kill what runs there). For tests and
        shutdown; blocking."""
        plan = self.plan()
        with self._lock:
            for parent in set(plan.parents.values()):
                if not parent.is_dir():
                    continue
                for directory in sorted(parent.rglob("*"), key=lambda p: -len(p.parts)):
                    if directory.is_dir():
                        RunCgroup(plan.version, {"": directory}, [], 0).kill()
                        with contextlib.suppress(OSError):
                            directory.rmdir()
                with contextlib.suppress(OSError):
                    parent.rmdir()


_managers: dict[SandboxLimits, SandboxCgroups] = {}
_managers_lock = threading.Lock()


def sandbox_cgroups(limits: SandboxLimits) -> SandboxCgroups:
    """The process's manager for these limits: every BashTool shares its set-up and logs."""
    with _managers_lock:
        manager = _managers.get(limits)
        if manager is None:
            manager = _managers[limits] = SandboxCgroups(limits)
        return manager
