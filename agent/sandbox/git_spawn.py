"""Git's network operations in a user's sandbox: a clone into a project's repository, a
push of one of its branches. What the server may name is checked here (the project by
its UUID, the action, a branch, the remote's URL as recorded); every path is made here
from the project's id, and git reaches the network only through the relay's socket (a
descriptor the server opened) by way of ``git_forwarder.py`` on the sandbox's loopback.
The broker's ``git`` request and a server that kept root (tests, a single-user machine)
build the same command line.

Git runs hardened: no system or global configuration, no prompt, no credential helper,
no hooks, no fsmonitor, only the http protocol (to the forwarder), no redirects, no
automatic gc, no submodules.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from agent.core.git import NEUTRAL
from agent.core.projects.layout import PROJECTS_DIR, Layout
from agent.core.tools.bwrap import sandbox_argv
from agent.sandbox import project_mounts
from agent.sandbox.spawn import parent_dirs

DIR_IN_SANDBOX = "/harness-git"
PORT_IN_SANDBOX = 47012
FORWARDER = Path(__file__).with_name("git_forwarder.py")
UUID = re.compile(r"^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
BRANCH = re.compile(r"^(?!-)(?!/)(?!.*\.\.)(?!.*//)(?!.*@\{)(?!.*\.lock$)(?!.*/$)"
                    r"[A-Za-z0-9._/+-]{1,200}$")  # fmt: skip
URL = re.compile(r"^https?://[\x21-\x7e]{1,1990}$")
ACTIONS = ("clone", "push")
# The clone's and push's git: Harness's one neutralising configuration (agent/core/git.py)
# as ``-c`` flags, and the relay's transport (plain http over its socket) alone allowed,
# no redirect followed.
TRANSPORT = (("protocol.http.allow", "always"), ("http.followRedirects", "false"))
HARDENING = [arg for key, value in (*NEUTRAL, *TRANSPORT) for arg in ("-c", f"{key}={value}")]
GIT = "/usr/bin/git"
OUTPUT_CAP = 64 * 1024  # what git says that is kept (its head and tail), wherever it runs


class Refused(Exception):
    pass


def project_repository(project_id) -> str:
    """Where a project's bare repository is, relative to its owner's workspace: the
    projects' one layout (agent/core/projects/layout.py), under the workspace's root."""
    text = str(project_id).lower()
    if not UUID.match(text):
        raise Refused("project must be a UUID")
    return Layout.of(PROJECTS_DIR, text).repo


def validate(message: dict) -> dict:
    action = message.get("action")
    if action not in ACTIONS:
        raise Refused("action must be clone or push")
    repository = project_repository(message.get("project", ""))
    branch = message.get("branch")
    if branch is not None and (not isinstance(branch, str) or not BRANCH.match(branch)):
        raise Refused("branch must be a plain branch name")
    if action == "push" and branch is None:
        raise Refused("a push names its branch")
    url = message.get("url")
    if action == "clone" and (not isinstance(url, str) or not URL.match(url)):
        raise Refused("url must be an http(s) URL")
    seconds = message.get("seconds")
    if type(seconds) is not int or not 0 < seconds <= 86400:
        raise Refused("seconds must be a whole number up to a day")
    return {"action": action, "repository": repository, "branch": branch, "url": url,
            "seconds": seconds}  # fmt: skip


def relay_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/git"


RELAY_URL = relay_url(PORT_IN_SANDBOX)
# Any port's: the file host's clones listen on a free one (agent/sandbox/host_clone.py).
RELAY_URLS = re.compile(r"http://127\.0\.0\.1:[0-9]{1,5}/git")


def plan(spec: dict, relay: str = RELAY_URL) -> dict:
    """The commands, run in order in the sandbox (cwd /workspace), and what a failure
    leaves to remove; git reaches the remote as ``relay``, the forwarder's address."""
    final = f"/workspace/{spec['repository']}"
    git = [GIT, *HARDENING]
    branch = spec["branch"]
    if spec["action"] == "clone":
        partial = final + ".partial"
        pick = ["--branch", branch] if branch else []
        home = os.path.dirname(final)
        # The file steps are done by the forwarder itself (git_forwarder.py): no process
        # to start for each, on the clone's fixed cost. Git is given the remote's own URL,
        # which it records as origin's, and reaches it as the relay's (``insteadOf``, for
        # this command alone): no second process to set the URL afterwards.
        relayed = ["-c", f"url.{relay}.insteadOf={spec['url']}"]
        return {
            "run": [
                {"do": "rmtree", "path": partial},
                {"do": "mkdir", "paths": [home], "parents": True},
                [
                    *git,
                    *relayed,
                    "clone",
                    "--bare",
                    "--quiet",
                    "--no-tags",
                    "--template=",
                    *pick,
                    "--",
                    spec["url"],
                    partial,
                ],
                # The shape of every project (agent/core/projects/repo.py): an empty hooks/
                # (read-only in the agents' sandboxes), its worktrees' and state's homes.
                {"do": "mkdir", "paths": [f"{partial}/hooks"], "mode": 0o755},
                {
                    "do": "mkdir",
                    "paths": [f"{home}/trees", f"{home}/state"],
                    "mode": 0o700,
                    "parents": True,
                },  # fmt: skip
                {"do": "rename", "path": partial, "to": final},
                {"do": "branch", "path": final},  # its default branch, said last
            ],
            "cleanup": [
                ["/bin/rm", "-rf", "--", partial],
                [
                    "/bin/rmdir",
                    "--ignore-fail-on-non-empty",
                    "--",
                    f"{os.path.dirname(final)}/trees",
                    f"{os.path.dirname(final)}/state",
                    os.path.dirname(final),
                ],  # fmt: skip
            ],
        }
    # Pushed from an empty repository of our own that borrows the project's objects
    # (alternates): nothing of the project's configuration or hooks is read by the push.
    ref, shadow = f"refs/heads/{branch}", "/tmp/push.git"
    borrow = 'printf "%s\\n" "$1" > "$2"'
    return {
        "run": [
            {"argv": [*git, "--git-dir", final, "rev-parse", "--verify", f"{ref}^{{commit}}"],
             "keep": "commit"},
            [*git, "init", "--bare", "--quiet", shadow],
            ["/bin/sh", "-c", borrow, "sh", f"{final}/objects",
             f"{shadow}/objects/info/alternates"],
            [*git, "--git-dir", shadow, "push", "--porcelain", "--", relay,
             f"{{commit}}:{ref}"],
        ],
        "cleanup": [],
    }  # fmt: skip


def argv(bwrap: str, spec: dict, workspace_fd: int, socket_fd: int, run_as: tuple[int, int],
         python: str, python_prefix: str, app: str,
         repo_fd: int | None = None) -> list[str]:  # fmt: skip
    """The sandbox's command line. A push (``repo_fd``: its repository, opened by
    ``project_mounts.open_repository``) sees that repository alone, read-only, where the
    workspace was: what it sends is this project's objects, never ones its repository
    borrows (``objects/info/alternates``, which the agent writes) from another project
    or from the plain workspace."""
    program = [python, "-I", "-S", "-B", f"{DIR_IN_SANDBOX}/forwarder.py",
               f"{DIR_IN_SANDBOX}/socket", str(PORT_IN_SANDBOX), str(spec["seconds"]),
               json.dumps(plan(spec))]  # fmt: skip
    base = sandbox_argv(bwrap, workspace_fd, "", run_as, program=program)
    extra = parent_dirs(python_prefix + "/x") + [
        "--perms", "01777", "--tmpfs", "/tmp",  # the user's (a privileged bwrap makes root's)
        "--ro-bind", python_prefix, python_prefix,
        "--perms", "0755", "--dir", DIR_IN_SANDBOX,
        "--ro-bind-fd", str(socket_fd), f"{DIR_IN_SANDBOX}/socket",
        "--ro-bind", os.path.join(app, "agent", "sandbox", FORWARDER.name),
        f"{DIR_IN_SANDBOX}/forwarder.py",
    ]  # fmt: skip
    if spec["action"] == "push":
        if repo_fd is None:
            raise Refused("a push needs its repository opened")
        inside = f"/workspace/{spec['repository']}"
        extra += ["--perms", "0755", "--tmpfs", "/workspace", *parent_dirs(inside),
                  "--ro-bind-fd", str(repo_fd), inside]  # fmt: skip
    separator = base.index("--")
    return base[:separator] + extra + base[separator:]


def start(broker, user: int, message: dict, fds: list[int], workspace_fd: int,
          hide: list[str]):  # fmt: skip
    """The broker's ``git`` request: (child, its cgroup, the read end of its output). A
    push only: under a broker the user's file host runs the clones (host_clone.py)."""
    spec = validate(message)
    if spec["action"] != "push":
        raise Refused("a clone is the file host's to run, not the broker's")
    if len(fds) != 1 or not stat.S_ISSOCK(os.fstat(fds[0]).st_mode):
        raise Refused("a git request sends one descriptor: the relay's socket")
    config = broker.config
    repo = repository_fd(workspace_fd, spec, message.get("project"))
    try:
        command = argv(broker._need_bwrap(), spec, workspace_fd, fds[0], config.ids(user),
                       config.python, config.python_prefix, config.app, repo)  # fmt: skip
        at = command.index("--")
        command[at:at] = hide
        read, write = os.pipe2(os.O_CLOEXEC)
        passed = [workspace_fd, fds[0]] + ([repo] if repo is not None else [])
        try:
            child, cgroup = broker.spawn(user, command, passed, stdout=write)
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
    finally:
        if repo is not None:
            os.close(repo)
    return child, cgroup, read


def repository_fd(workspace_fd: int, spec: dict, project) -> int | None:
    """For a push, its repository opened by descriptor (None for a clone)."""
    if spec["action"] != "push":
        return None
    try:
        return project_mounts.open_repository(workspace_fd, project)
    except project_mounts.Refused as exc:
        raise Refused(str(exc)) from None
