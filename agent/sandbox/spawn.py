"""What the broker starts, and how: each sandboxed process as its user's uid, in its user's
cgroup, with rlimits, inside bubblewrap. The one spawn path for bash, the per-user file
host and the CLI agents; nothing here takes a path from a request."""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass, field
from pathlib import Path

from agent.core.tools.bash import FILE_SIZE_LIMIT, MEMORY_LIMIT
from agent.core.tools.bwrap import SANDBOX_PATH, sandbox_argv
from agent.core.tools.cgroups import RunCgroup
from agent.sandbox.signal_defaults import default_signals

APP_IN_SANDBOX = "/opt/harness"  # the agent package, read-only, for the file host
HOST_NOFILE = 1024
# A CLI agent is node: its WebAssembly (undici's HTTP parser) reserves far more address
# space than it uses, so its memory is bounded by the cgroup, and this only stops runaways.
CLI_ADDRESS_SPACE = 64 << 30


@dataclass(frozen=True)
class BrokerConfig:
    """What the broker is told once, at its start, by the root launcher (never by a
    request): where workspaces live, the uids, the limits and what may be mounted."""

    service_uid: int
    service_gid: int
    uid_base: int
    workspaces: str
    storage: str = "plain"
    quota_mb: int = 1024
    var_dir: str = ""
    pids: int = 256
    memory_mb: int = 2048
    cgroups: str = "auto"
    cgroup_path: str = ""
    python_prefix: str = ""  # the interpreter's installation (sys.base_prefix)
    python: str = ""  # its binary
    app: str = ""  # the directory holding the ``agent`` package
    attach_socket: str = ""
    cli_roots: list[str] = field(default_factory=list)  # CLI installs, bound read-only

    def ids(self, user_id: int) -> tuple[int, int]:
        uid = self.uid_base + int(user_id)
        return uid, uid


def limits(cgroup: RunCgroup | None, nproc: int | None, nofile: int | None = None,
           address_space: int = MEMORY_LIMIT):  # fmt: skip
    def apply() -> None:  # in the child, between fork and exec: inherited by everything
        if cgroup is not None:
            cgroup.join()
        default_signals()
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    return apply


def _ancestors(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def parent_dirs(path: str) -> list[str]:
    # bwrap, privileged, would make these parents closed to the sandbox's user.
    out = []
    for directory in _ancestors(path):
        out += ["--perms", "0755", "--dir", directory]
    return out


def host_argv(bwrap: str, config: BrokerConfig, workspace_fd: int, sock_fd: int,
              run_as: tuple[int, int]) -> list[str]:  # fmt: skip
    """The file host: the agent package's own code, on the interpreter's standard library
    only (-I -S: no site-packages, no environment), in the user's sandbox."""
    code = (
        f"import sys; sys.path.insert(0, {APP_IN_SANDBOX!r}); "
        f"from agent.sandbox.host import main; main({sock_fd})"
    )
    program = [config.python, "-I", "-S", "-B", "-c", code]
    argv = sandbox_argv(bwrap, workspace_fd, "", run_as, program=program)
    extra = parent_dirs(config.python_prefix + "/x") + [
        "--ro-bind", config.python_prefix, config.python_prefix,
        "--perms", "0755", "--dir", "/opt",
        "--perms", "0755", "--dir", APP_IN_SANDBOX,
        "--ro-bind", os.path.join(config.app, "agent"), APP_IN_SANDBOX + "/agent",
    ]  # fmt: skip
    separator = argv.index("--")
    return argv[:separator] + extra + argv[separator:]


SPAWN_ENV = {"PATH": SANDBOX_PATH}
