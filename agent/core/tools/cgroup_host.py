"""cgroups on this host: what its mounts offer the sandbox (read-only), where the sandbox
cgroups would go (``Plan``), and the one way their files are read and written."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

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


def read_text(path: Path) -> str:
    with open(path) as f:
        return f.read()


def write_value(path: Path, value: str) -> None:
    # One write(2): cgroup files take one value per write, and a partial write of a
    # buffered file object would be a different value.
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def keyed(path: Path, key: str) -> int:
    """The number after ``key`` in a flat-keyed cgroup file (memory.events, pids.events,
    memory.oom_control); 0 when absent."""
    with contextlib.suppress(OSError):
        for line in read_text(path).splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    return 0


def delegated(directory: Path) -> bool:
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
        if own != "/" and not delegated(own_dir):
            return Plan(
                reason=f"the server's cgroup {own} is not delegated to it (systemd: "
                "Delegate=yes) and HARNESS_CGROUP is not set"
            )
        plan.enable_in, plan.may_move, plan.own_parent = own_dir, True, True
        parent = own_dir / PARENT_NAME
    try:
        offered = set(read_text(plan.enable_in / "cgroup.controllers").split())
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


def enable_text(controllers: Iterable[str]) -> str:
    return " ".join(f"+{c}" for c in ALL if c in set(controllers))


def write_if_changed(path: Path, value: str) -> None:
    # Rewriting an unchanged v1 memory limit may fail (EBUSY) when usage is near it.
    with contextlib.suppress(OSError):
        if read_text(path).strip() == value:
            return
    write_value(path, value)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
