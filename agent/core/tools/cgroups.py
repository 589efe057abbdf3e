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
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

log = logging.getLogger(__name__)

CONTROLLERS = ("pids", "memory")  # the limits; both are needed for "required"
# Shared fairly, not limited: each workspace's cgroup has the same weight, so one user's
# busy commands get no more CPU than another's when both want it.
FAIR = ("cpu",)
ALL = CONTROLLERS + FAIR
MODES = ("auto", "off", "required")
SERVER_LEAF = "server"  # v2: the leaf the server's own processes move into
PARENT_NAME = "harness"
MOUNTINFO = "/proc/self/mountinfo"
PROC_CGROUP = "/proc/self/cgroup"
RELEASE_SECONDS = 3.0  # how long a finished call's cgroup may take to empty


class CgroupError(OSError):
    pass


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """What every sandbox of one workspace may hold at once, all its bash calls together.

    ``cgroups``: ``auto`` uses cgroups where the host allows and falls back to rlimits;
    ``required`` refuses to run bash without both controllers; ``off`` uses rlimits only.
    ``cgroup_path``: the parent cgroup, as a path from the hierarchy's root (v1: in both the
    pids and the memory hierarchy); empty: ``harness`` below the server's own cgroup."""

    pids: int = 256
    memory_mb: int = 2048
    cgroups: str = "auto"
    cgroup_path: str = ""

    def __post_init__(self) -> None:
        if self.cgroups not in MODES:
            raise ValueError(f"cgroups must be one of {', '.join(MODES)}, not {self.cgroups!r}")
        if self.pids < 1 or self.memory_mb < 1:
            raise ValueError("the process and memory limits must be positive")
        if self.cgroup_path and not self.cgroup_path.startswith("/"):
            raise ValueError(f"the cgroup path must start with '/', not {self.cgroup_path!r}")


# -- What the host offers (read-only) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mount:
    point: str
    root: str  # the cgroup mounted there, as a path from the hierarchy's root
    fstype: str  # cgroup | cgroup2
    options: frozenset[str]


def _unescape(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), text)


def parse_mountinfo(text: str) -> list[Mount]:
    mounts = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        options = frozenset(tail[2].split(","))
        mounts.append(Mount(_unescape(fields[4]), _unescape(fields[3]), tail[0], options))
    return mounts


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """Controller name -> the process's cgroup path; "" is the v2 hierarchy's."""
    found = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, names, path = parts
        if parts[0] == "0" and names == "":
            found[""] = path
        for name in names.split(","):
            if name:
                found[name] = path
    return found


def cgroup_dir(mount: Mount, path: str) -> Path | None:
    """Where the cgroup ``path`` appears under ``mount``; None when it is not below it."""
    root = mount.root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    return Path(mount.point + path[len(root) :])


def _read(path: Path) -> str:
    with open(path) as f:
        return f.read()


def _write(path: Path, value: str) -> None:
    # One write(2): cgroup files take one value per write, and a partial write of a
    # buffered file object would be a different value.
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _keyed(path: Path, key: str) -> int:
    """The number after ``key`` in a flat-keyed cgroup file (memory.events, pids.events,
    memory.oom_control); 0 when absent."""
    with contextlib.suppress(OSError):
        for line in _read(path).splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    return 0


def _delegated(directory: Path) -> bool:
    """systemd marks a cgroup it delegated (Delegate=yes) with this extended attribute."""
    for name in ("trusted.delegate", "user.delegate"):
        with contextlib.suppress(OSError):
            if os.getxattr(directory, name).strip(b"\0").strip() == b"1":
                return True
    return False


@dataclass(slots=True)
class Plan:
    """Where the sandbox cgroups go, before anything is written."""

    version: int = 0  # 1 or 2; 0: no cgroups
    parents: dict[str, Path] = field(default_factory=dict)  # controller -> parent cgroup
    enable_in: Path | None = None  # v2: whose subtree_control must list the controllers
    may_move: bool = False  # v2: the processes in ``enable_in`` may move to a leaf
    own_parent: bool = False  # the parent is ours to remove when empty
    reason: str = ""  # why a controller is missing

    @property
    def controllers(self) -> frozenset[str]:
        return frozenset(self.parents)

    def where(self) -> str:
        return ", ".join(sorted({str(p) for p in self.parents.values()}))


def _plan_v2(limits: SandboxLimits, mounts: list[Mount], mine: dict[str, str]) -> Plan:
    v2 = [m for m in mounts if m.fstype == "cgroup2"]
    if not v2:
        return Plan(reason="no cgroup2 file system is mounted")
    # A pure v2 host mounts it at /sys/fs/cgroup; a hybrid one elsewhere (…/unified).
    mount = min(v2, key=lambda m: (m.point != "/sys/fs/cgroup", len(m.point)))
    plan = Plan(version=2)
    if limits.cgroup_path:
        parent = cgroup_dir(mount, limits.cgroup_path)
        if parent is None or parent == Path(mount.point):
            return Plan(reason=f"HARNESS_CGROUP {limits.cgroup_path} is not below {mount.point}")
        plan.enable_in = parent.parent
    else:
        own = mine.get("")
        own_dir = cgroup_dir(mount, own) if own is not None else None
        if own is None or own_dir is None:
            return Plan(reason=f"the server's cgroup v2 is not visible under {mount.point}")
        if PurePosixPath(own).name == SERVER_LEAF:  # this server moved itself there before
            own, own_dir = str(PurePosixPath(own).parent), own_dir.parent
        if own != "/" and not _delegated(own_dir):
            return Plan(
                reason=f"the server's cgroup {own} is not delegated to it (systemd: "
                "Delegate=yes) and HARNESS_CGROUP is not set"
            )
        plan.enable_in, plan.may_move, plan.own_parent = own_dir, True, True
        parent = own_dir / PARENT_NAME
    try:
        offered = set(_read(plan.enable_in / "cgroup.controllers").split())
    except OSError as exc:
        return Plan(reason=f"cannot read {plan.enable_in}/cgroup.controllers ({exc.strerror})")
    plan.parents = {c: parent for c in ALL if c in offered}
    if not any(c in plan.parents for c in CONTROLLERS):
        plan.parents = {}  # CPU alone is no reason to make cgroups: rlimits then
    missing = [c for c in CONTROLLERS if c not in offered]
    if missing:
        plan.reason = f"cgroup v2 offers no {' or '.join(missing)} controller at {plan.enable_in}"
    return plan


def _plan_v1(limits: SandboxLimits, mounts: list[Mount], mine: dict[str, str]) -> Plan:
    plan = Plan(version=1, own_parent=not limits.cgroup_path)
    missing = []
    for controller in ALL:
        mount = next((m for m in mounts if m.fstype == "cgroup" and controller in m.options), None)
        own = mine.get(controller)
        if mount is None or own is None:
            missing.append(controller)
            continue
        path = limits.cgroup_path or str(PurePosixPath(own) / PARENT_NAME)
        parent = cgroup_dir(mount, path)
        if parent is None:
            missing.append(controller)
            continue
        plan.parents[controller] = parent
    missing = [c for c in missing if c in CONTROLLERS]  # sharing CPU is a bonus
    if not any(c in plan.parents for c in CONTROLLERS):
        plan.parents = {}
    if missing:
        plan.reason = f"no cgroup v1 hierarchy for {' or '.join(missing)}"
    return plan


def make_plan(limits: SandboxLimits, mountinfo: str, proc_cgroup: str) -> Plan:
    if limits.cgroups == "off":
        return Plan(reason="HARNESS_SANDBOX_CGROUPS=off")
    mounts, mine = parse_mountinfo(mountinfo), parse_proc_cgroup(proc_cgroup)
    v2 = _plan_v2(limits, mounts, mine)
    if v2.controllers >= frozenset(CONTROLLERS):
        return v2
    v1 = _plan_v1(limits, mounts, mine)
    best = v1 if len(v1.controllers) >= len(v2.controllers) and v1.controllers else v2
    if not best.controllers:
        best = Plan(reason=f"{v2.reason}; {v1.reason}")
    return best


# -- One bash call's cgroup --------------------------------------------------------------------


@dataclass(slots=True)
class RunStats:
    oom_kills: int  # processes the kernel killed for want of memory
    pids_limit_hits: int  # forks refused by the process limit (any call of this workspace)


class RunCgroup:
    """The cgroup(s) of one bash call: one directory per hierarchy (one on v2)."""

    def __init__(self, version: int, runs: dict[str, Path], fds: list[int], pids_before: int):
        self.version = version
        self.runs = runs  # controller -> this call's cgroup
        self.fds = fds  # cgroup.procs of each, opened by the server
        self.pids_before = pids_before

    @property
    def controllers(self) -> frozenset[str]:
        return frozenset(self.runs)

    @property
    def dirs(self) -> list[Path]:
        return sorted(set(self.runs.values()))

    def join(self) -> None:
        """Move the calling process in. Runs in the child between fork and exec (the
        preexec_fn): writing 0 to cgroup.procs moves the writer, so the command and all it
        starts are in the cgroup from its first instruction. An error aborts the exec."""
        for fd in self.fds:
            os.write(fd, b"0")

    def close_fds(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []

    def stats(self) -> RunStats:
        oom = 0
        memory = self.runs.get("memory")
        if memory is not None:
            if self.version == 2:
                oom = _keyed(memory / "memory.events", "oom_kill")
            else:
                oom = _keyed(memory / "memory.oom_control", "oom_kill")
        hits = 0
        pids = self.runs.get("pids")
        if pids is not None:
            # v1 counts a refused fork in the forking cgroup (this call's); v2 in the cgroup
            # whose limit refused it (the workspace's) and its ancestors.
            hits = _keyed(pids / "pids.events", "max")
            hits += max(0, _keyed(pids.parent / "pids.events", "max") - self.pids_before)
        return RunStats(oom, hits)

    def kill(self) -> bool:
        """Kill every process left in the call's cgroups; True when none was left."""
        left: set[int] = set()
        for directory in self.dirs:
            if self.version == 2:
                # cgroup.kill (Linux 5.14+) kills the whole subtree at once, forks included.
                with contextlib.suppress(OSError):
                    _write(directory / "cgroup.kill", "1")
            with contextlib.suppress(OSError):
                left.update(int(p) for p in _read(directory / "cgroup.procs").split())
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return not left

    def remove(self) -> bool:
        """rmdir the call's cgroups; True when all are gone."""
        gone = True
        for directory in self.dirs:
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                    raise
                gone = False
        return gone


# -- The server's sandbox cgroups ---------------------------------------------------------------


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
                texts = [_read(Path(p)) for p in self._sources]
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
                    _write(workspace / "cgroup.subtree_control", _enable_text(controllers))
                self._set_limits(plan.version, workspace, controllers)
                if "pids" in controllers:
                    pids_before = _keyed(workspace / "pids.events", "max")
                run = workspace / name
                run.mkdir()
                made.append(run)
                if plan.version == 2 and "memory" in controllers:
                    # On an out-of-memory kill, kill the whole call, not one of its
                    # processes: a half-killed command leaves confusing output.
                    with contextlib.suppress(OSError):
                        _write(run / "memory.oom.group", "1")
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
        text = _enable_text(plan.parents)
        try:
            _write(plan.enable_in / "cgroup.subtree_control", text)
        except OSError as exc:
            if exc.errno != errno.EBUSY or not plan.may_move:
                raise
            leaf = plan.enable_in / SERVER_LEAF
            with contextlib.suppress(FileExistsError):
                leaf.mkdir()
            for pid in _read(plan.enable_in / "cgroup.procs").split():
                with contextlib.suppress(ProcessLookupError):
                    _write(leaf / "cgroup.procs", pid)
            _write(plan.enable_in / "cgroup.subtree_control", text)
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
            _write(parent / "cgroup.subtree_control", _enable_text(plan.parents))
        elif "memory" in plan.parents and plan.parents["memory"] == parent:
            # Old v1 kernels count a child's memory in its parent only with this on (new
            # ones always do and refuse the write).
            with contextlib.suppress(OSError):
                if _read(parent / "memory.use_hierarchy").strip() == "0":
                    _write(parent / "memory.use_hierarchy", "1")

    def _set_limits(self, version: int, workspace: Path, controllers: list[str]) -> None:
        limit = self.limits.memory_mb * 1024**2
        if "pids" in controllers:
            _write_if_changed(workspace / "pids.max", str(self.limits.pids))
        if "memory" not in controllers:
            return
        if version == 2:
            _write_if_changed(workspace / "memory.max", str(limit))
            # Without this the limit only pushes the sandbox's memory into swap.
            if (workspace / "memory.swap.max").exists():
                _write_if_changed(workspace / "memory.swap.max", "0")
            return
        # v1: memory+swap may not be below memory, so the order depends on the direction.
        memsw = workspace / "memory.memsw.limit_in_bytes"
        current = int(_read(workspace / "memory.limit_in_bytes"))
        order = [workspace / "memory.limit_in_bytes", memsw]
        if limit > current:
            order.reverse()
        for path in order:
            if path.exists():
                _write_if_changed(path, str(limit))

    def _sweep(self, plan: Plan) -> None:
        """Remove call cgroups that a dead server process left (it crashed mid-call)."""
        for parent in set(plan.parents.values()):
            with contextlib.suppress(OSError):
                for workspace in parent.iterdir():
                    if not workspace.is_dir() or not workspace.name.startswith("ws-"):
                        continue
                    for run in workspace.iterdir():
                        match = re.fullmatch(r"run-(\d+)-\d+", run.name)
                        if match and not _alive(int(match[1])):
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


def _enable_text(controllers: Iterable[str]) -> str:
    return " ".join(f"+{c}" for c in ALL if c in set(controllers))


def _write_if_changed(path: Path, value: str) -> None:
    # Rewriting an unchanged v1 memory limit may fail (EBUSY) when usage is near it.
    with contextlib.suppress(OSError):
        if _read(path).strip() == value:
            return
    _write(path, value)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_managers: dict[SandboxLimits, SandboxCgroups] = {}
_managers_lock = threading.Lock()


def sandbox_cgroups(limits: SandboxLimits) -> SandboxCgroups:
    """The process's manager for these limits: every BashTool shares its set-up and logs."""
    with _managers_lock:
        manager = _managers.get(limits)
        if manager is None:
            manager = _managers[limits] = SandboxCgroups(limits)
        return manager
