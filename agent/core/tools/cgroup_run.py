"""One bash call's cgroup: joined between fork and exec, read for what the kernel refused,
killed and removed when the call ends."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from agent.core.tools.cgroup_host import keyed, read_text, write_value


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
                oom = keyed(memory / "memory.events", "oom_kill")
            else:
                oom = keyed(memory / "memory.oom_control", "oom_kill")
        hits = 0
        pids = self.runs.get("pids")
        if pids is not None:
            # v1 counts a refused fork in the forking cgroup (this call's); v2 in the cgroup
            # whose limit refused it (the workspace's) and its ancestors.
            hits = keyed(pids / "pids.events", "max")
            hits += max(0, keyed(pids.parent / "pids.events", "max") - self.pids_before)
        return RunStats(oom, hits)

    def kill(self) -> bool:
        """Kill every process left in the call's cgroups; True when none was left."""
        left: set[int] = set()
        for directory in self.dirs:
            if self.version == 2:
                # cgroup.kill (Linux 5.14+) kills the whole subtree at once, forks included.
                with contextlib.suppress(OSError):
                    write_value(directory / "cgroup.kill", "1")
            with contextlib.suppress(OSError):
                left.update(int(p) for p in read_text(directory / "cgroup.procs").split())
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
