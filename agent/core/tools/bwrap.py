"""The sandbox's bubblewrap command line (agent/core/tools/bash.py says what it holds and
hides): what every sandboxed process (a bash call, a CLI agent, the terminal, git) starts
with."""

from __future__ import annotations

import os
import shutil

# The egress proxy's socket and the forwarder inside a sandbox (HARNESS_EGRESS=proxy):
# the forwarder (agent/sandbox/egress_forwarder.py, on the git forwarder's relay) listens
# on the sandbox's loopback at EGRESS_PORT and runs the command with the proxy variables.
EGRESS_DIR = "/opt/harness-egress"
EGRESS_PORT = 3128
_FORWARDERS = os.path.join(os.path.dirname(__file__), "..", "..", "sandbox")
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
# Host files that ordinary programs need; everything else under /etc stays hidden.
ETC_FILES = (
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/ssl/certs",
    "/etc/ca-certificates",
    "/etc/mime.types",
    "/etc/bash.bashrc",
    "/etc/profile",
    "/etc/inputrc",
    "/etc/debian_version",
    "/etc/os-release",
)


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


SETPRIV = "/usr/bin/setpriv"


def sandbox_argv(
    bwrap: str,
    workspace_fd: int,
    command: str,
    run_as: tuple[int, int] | None = None,
    program: list[str] | None = None,
    proc: bool = True,
    egress: int | str | None = None,
) -> list[str]:
    """The bwrap command line. ``run_as``: a root server's sandbox runs bwrap privileged
    (no user namespace, so it can mount what root can reach) and the command drops to this
    uid/gid first thing, with no_new_privs; its real uid is then unprivileged, which is what
    makes RLIMIT_NPROC bind. Otherwise bwrap makes a user namespace as the calling user.
    ``program``: what runs instead of ``bash -c command``. ``proc``: a /proc of its own
    (a sandbox started inside another, unprivileged, may not mount one: the outer's has
    parts mounted over). ``egress``: the egress proxy's Unix socket for this sandbox, bound
    in with the forwarder that makes it the only route out (None: no network at all): a
    descriptor (opened ``O_PATH`` by the starter, passed to bwrap), or its path where no
    descriptor can pass (tmux starting the sandbox of a server that is not root)."""
    program = program or ["/bin/bash", "-c", command]
    binds: list[str] = []
    if egress is not None:
        # open to the command's uid (bwrap, privileged, would make them root's alone)
        binds += ["--perms", "0755", "--dir", "/opt", "--perms", "0755", "--dir", EGRESS_DIR]
        for name in ("egress_forwarder.py", "git_forwarder.py"):
            source = os.path.realpath(os.path.join(_FORWARDERS, name))
            binds += ["--ro-bind", source, f"{EGRESS_DIR}/{name}"]
        how = "--ro-bind-fd" if isinstance(egress, int) else "--ro-bind"
        binds += [how, str(egress), f"{EGRESS_DIR}/proxy.sock"]
        program = ["/usr/bin/python3", "-I", "-S", f"{EGRESS_DIR}/egress_forwarder.py",
                   f"{EGRESS_DIR}/proxy.sock", str(EGRESS_PORT), *program]  # fmt: skip
    argv = [bwrap, "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin", "lib32", "libx32"):
        target = os.path.realpath(f"/{name}")
        if target.startswith("/usr/"):
            argv += ["--symlink", target.removeprefix("/"), f"/{name}"]
    # /etc open to the command's uid (bwrap, privileged, would make it root's alone): a
    # program looking for a file that is not there (git's /etc/gitconfig) is told so.
    argv += ["--perms", "0755", "--dir", "/etc"]
    for path in ETC_FILES:
        if os.path.exists(path):
            # (and its parents below /etc: node reads /etc/ssl/openssl.cnf, absent, at start)
            argv += parent_dirs_in_etc(path) + ["--ro-bind", path, path]
    argv += [
        # The workspace goes in as a descriptor opened by the server, so no path swap can
        # change what is mounted.
        "--bind-fd", str(workspace_fd), "/workspace",
        "--chdir", "/workspace",
        # The user's to write, sticky like a host's (a privileged bwrap's tmpfs would be
        # root's 0755); bounded by the sandbox's memory limit, which its pages count in.
        "--perms", "1777", "--tmpfs", "/tmp",
        *(["--proc", "/proc"] if proc else []),
        "--dev", "/dev",
        *binds,
    ]  # fmt: skip
    if run_as is None:
        argv += ["--unshare-all"]  # user, ipc, pid, net, uts, cgroup: no network
        inner = program
    else:
        uid, gid = run_as
        argv += [
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--cap-add",
            "CAP_SETUID",
            "--cap-add",
            "CAP_SETGID",
        ]
        inner = [SETPRIV, f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                 "--no-new-privs", "--", *program]  # fmt: skip
    argv += [
        "--hostname", "sandbox",
        "--die-with-parent",
        "--new-session",  # no TIOCSTI into the server's terminal
        "--clearenv",
        "--setenv", "PATH", SANDBOX_PATH,
        "--setenv", "HOME", "/workspace",
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "TERM", "dumb",
        "--setenv", "TMPDIR", "/tmp",
        "--", *inner,
    ]  # fmt: skip
    return argv


def parent_dirs_in_etc(path: str) -> list[str]:
    parents = os.path.dirname(path).split("/")[2:]
    found = []
    for i in range(len(parents)):
        found += ["--perms", "0755", "--dir", "/etc/" + "/".join(parents[: i + 1])]
    return found
