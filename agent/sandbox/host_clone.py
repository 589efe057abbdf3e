"""A project's clone, run by the user's file host itself (agent/sandbox/host.py). The host
already runs as the user in their sandbox, with the workspace where a clone writes, so a
clone starts no sandbox of its own: that start (the broker's spawn, the cgroup's,
bubblewrap's and the forwarder's interpreter) was most of what a clone cost over git's.

The server sends the clone's fields, checked again here (``git_spawn.validate``), and,
with them, the git relay's socket as a descriptor (opened ``O_PATH`` in the server; the
host connects through ``/proc/self/fd/N``). The host listens on a free port of its
sandbox's own loopback, relays each connection to the relay (``git_forwarder``), and runs
the clone's plan: one hardened git process, and on failure the cleanup. The host's
network namespace holds the host and its git alone: every other sandbox, the project
workers the host starts included, has its own, so nothing an agent runs reaches the port.
What git says comes back bounded (its head and tail).

A push still runs in a sandbox of its own (git_spawn.argv): it must see its one
repository alone, which the host, seeing every project of the user, does not.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import threading

from agent.core.tools.process import HeadTailBuffer, drain_fd
from agent.sandbox import git_forwarder, git_spawn

# The server holds a user to three clones at once (agent/runs/projects.py); the host,
# whose threads they hold for as long as git runs, holds them to it too.
CLONES_AT_ONCE = 3
_clones = threading.BoundedSemaphore(CLONES_AT_ONCE)


def clone(fields: dict, fds: list[int]) -> dict:
    """The clone ``fields`` asks for (``fds``: the relay's socket, the caller's to close):
    its exit status (124: out of time) and what git said."""
    spec = git_spawn.validate(fields)
    if spec["action"] != "clone":
        raise git_spawn.Refused("the file host runs clones only")
    if len(fds) != 1 or not stat.S_ISSOCK(os.fstat(fds[0]).st_mode):
        raise git_spawn.Refused("a clone sends one descriptor: the relay's socket")
    if not _clones.acquire(blocking=False):
        raise git_spawn.Refused(f"at most {CLONES_AT_ONCE} clones run at once")
    out = HeadTailBuffer(git_spawn.OUTPUT_CAP)
    with contextlib.ExitStack() as held:  # let go in reverse, whatever fails where
        held.callback(_clones.release)
        listener = git_forwarder.listen(f"/proc/self/fd/{fds[0]}", 0)
        held.callback(listener.close)
        # git's HOME: empty and its own (the host's /tmp lives as long as the host)
        home = tempfile.mkdtemp(prefix="clone-home-")
        held.callback(shutil.rmtree, home, True)
        plan = git_spawn.plan(spec, git_spawn.relay_url(listener.port))
        read, write = os.pipe2(os.O_CLOEXEC)
        drained = threading.Thread(target=drain_fd, args=(read, out), daemon=True)
        try:
            drained.start()  # from here the drain closes ``read``
        except BaseException:
            os.close(read)
            os.close(write)
            raise
        try:
            code = git_forwarder.run(plan, spec["seconds"], write, home)
        finally:
            os.close(write)  # the drain ends once git's children have let go of it too
            drained.join()
    return {"exit": code, "output": out.text(), "truncated": out.truncated,
            "total": out.total}  # fmt: skip
