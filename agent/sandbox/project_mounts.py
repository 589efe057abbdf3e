"""What a sandbox sees of its user's projects (root's side: the broker, or a root server
without one). Every directory is opened from the workspace's descriptor one component at a
time, never through a link, on the workspace's own file system, and bound by descriptor:
nothing in a user-writable tree can redirect a mount.

- The file host gets the whole projects directory at ``/projects`` (``MOUNT``).
- A project conversation's bash and CLI sandbox get its worktree at ``/workspace`` and, so
  that git's absolute back-pointers hold, the repository and the same worktree at their
  ``/projects/...`` paths; the repository's ``config``, ``hooks/``, ``objects/info``
  (alternates), the other worktrees' administrative directories and its own's
  ``commondir`` and ``gitdir`` read-only, ``objects`` a mount point (it cannot be moved
  aside for a link): nothing there can point Harness's git (which runs where every
  project is visible) at another project; no other conversation's worktree.
- Every other sandbox sees an empty, read-only directory where the projects are.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field

from agent.core.projects import MOUNT, PROJECTS_DIR
from agent.core.projects.layout import hex_id

# A worktree's administrative files that name where git goes: the repository (commondir,
# which Harness's git follows for refs) and the worktree (gitdir, for prune and remove).
POINTERS = ("commondir", "gitdir")


class Refused(Exception):
    pass


def _open(parent: int, name: str, device: int, kind: int) -> int:
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags | (os.O_DIRECTORY if kind == stat.S_IFDIR else 0), dir_fd=parent)
    except OSError:
        raise Refused(f"the project's {name} is missing") from None
    st = os.fstat(fd)
    if stat.S_IFMT(st.st_mode) != kind or st.st_dev != device:
        os.close(fd)
        raise Refused(f"the project's {name} is not what it should be")
    return fd


def ensure_dir(workspace_fd: int, ids: tuple[int, int] | None) -> None:
    """The projects directory in the workspace's root, the user's (made by root: no
    sandbox may start before it exists, or it would be no one's to hide)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(PROJECTS_DIR, 0o700, dir_fd=workspace_fd)
    fd = projects_fd(workspace_fd)
    try:
        st = os.fstat(fd)
        if ids is not None and (st.st_uid, st.st_gid) != ids:
            os.chown(f"/proc/self/fd/{fd}", *ids)
    finally:
        os.close(fd)


def projects_fd(workspace_fd: int) -> int:
    return _open(workspace_fd, PROJECTS_DIR, os.fstat(workspace_fd).st_dev, stat.S_IFDIR)


def open_repository(workspace_fd: int, project) -> int:
    """A project's repository, opened (``O_PATH``): what a push's sandbox sees of the
    workspace, and nothing else (its ``objects/info/alternates`` may name another
    project's objects, or a repository in the plain workspace: they are not there)."""
    try:
        project = hex_id(project)
    except ValueError:
        raise Refused("project must be an id") from None
    device = os.fstat(workspace_fd).st_dev
    projects = projects_fd(workspace_fd)
    try:
        home = _open(projects, project, device, stat.S_IFDIR)
    finally:
        os.close(projects)
    try:
        return _open(home, "repo.git", device, stat.S_IFDIR)
    finally:
        os.close(home)


def has_projects(workspace_fd: int) -> bool:
    try:
        os.close(projects_fd(workspace_fd))
    except Refused:
        return False
    return True


def hidden() -> list[str]:
    return ["--tmpfs", f"/workspace/{PROJECTS_DIR}", "--remount-ro", f"/workspace/{PROJECTS_DIR}"]


def host_binds(fd: int) -> list[str]:
    return ["--perms", "0755", "--dir", MOUNT, "--bind-fd", str(fd), MOUNT]


@dataclass
class Worktree:
    """A conversation's worktree and its repository, opened; ``tree`` goes where the
    workspace would, ``binds`` before the sandbox's ``--``."""

    tree: int
    binds: list[str]
    fds: list[int] = field(default_factory=list)  # all of them, ``tree`` included

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def requested(workspace_fd: int, message: dict) -> Worktree | None:
    """The worktree a broker request names (``project``, ``conversation``), or None."""
    if message.get("project") is None:
        return None
    return open_worktree(workspace_fd, message["project"], message.get("conversation"))


def _home(workspace_fd: int, project: str, opened: list[int]) -> tuple[int, int]:
    """The project's directory, opened (and the device every part must be on)."""
    device = os.fstat(workspace_fd).st_dev
    projects = projects_fd(workspace_fd)
    opened.append(projects)
    home = _open(projects, project, device, stat.S_IFDIR)
    opened.append(home)
    return home, device


def open_worktree(workspace_fd: int, project, conversation) -> Worktree:
    try:
        project, conversation = hex_id(project), hex_id(conversation)
    except ValueError:
        raise Refused("project and conversation must be ids") from None
    opened: list[int] = []
    try:
        home, device = _home(workspace_fd, project, opened)
        return _worktree(home, device, project, conversation, opened)
    except BaseException:
        for fd in opened:
            os.close(fd)
        raise


def _worktree(home: int, device: int, project: str, conversation: str,
              opened: list[int]) -> Worktree:  # fmt: skip
    def need(parent: int, name: str, kind: int = stat.S_IFDIR) -> int:
        opened.append(_open(parent, name, device, kind))
        return opened[-1]

    repo = need(home, "repo.git")
    config = need(repo, "config", stat.S_IFREG)
    hooks = need(repo, "hooks")
    objects = need(repo, "objects")
    info = need(objects, "info")
    admin = need(need(repo, "worktrees"), conversation)
    pointers = [need(admin, name, stat.S_IFREG) for name in POINTERS]
    tree = need(need(home, "trees"), conversation)
    again = os.dup(tree)  # its second mount: bwrap may close a descriptor once used
    opened.append(again)
    at = f"{MOUNT}/{project}"
    admins = f"{at}/repo.git/worktrees"
    binds = [
        "--perms", "0755", "--dir", MOUNT,
        "--perms", "0755", "--dir", at,
        "--perms", "0755", "--dir", f"{at}/trees",
        "--bind-fd", str(repo), f"{at}/repo.git",
        "--ro-bind-fd", str(config), f"{at}/repo.git/config",
        "--ro-bind-fd", str(hooks), f"{at}/repo.git/hooks",
        # objects a mount point (rename gets EBUSY: no link to another project's in its
        # place) and objects/info read-only (no alternates lending another's objects).
        "--bind-fd", str(objects), f"{at}/repo.git/objects",
        "--ro-bind-fd", str(info), f"{at}/repo.git/objects/info",
        # Of the worktrees' administrative directories only its own (the others' HEAD,
        # index and lock are neither seen nor reachable by a `.git` file naming them),
        # writable but for the pointers naming the repository (commondir) and the
        # worktree (gitdir); the directory holding it an empty, read-only file system.
        "--tmpfs", admins,
        "--bind-fd", str(admin), f"{admins}/{conversation}",
        *(arg for name, fd in zip(POINTERS, pointers, strict=True)
          for arg in ("--ro-bind-fd", str(fd), f"{admins}/{conversation}/{name}")),
        "--remount-ro", admins,
        "--bind-fd", str(again), f"{at}/trees/{conversation}",
    ]  # fmt: skip
    return Worktree(tree=tree, binds=binds, fds=opened)


def open_operation(workspace_fd: int, project, conversation,
                   ids: tuple[int, int] | None) -> Worktree:  # fmt: skip
    """What Harness's own git sees for one project operation (agent/core/projects/ops.py),
    and nothing more: for a conversation's, exactly what that conversation's agent sees
    (above) and the conversation's private state (``state/<conversation>``); for the
    project's, its directory alone. The agent's links, made at any moment during the
    operation, can then only lead where the agent itself can go: never to another
    project, another conversation's worktree or the user's workspace. ``tree`` is what
    the sandbox shows as its workspace. ``ids``: whose a directory made here is (a root
    caller's; None when the caller is the user)."""
    try:
        project = hex_id(project)
        conversation = hex_id(conversation) if conversation else ""
    except ValueError:
        raise Refused("project and conversation must be ids") from None
    opened: list[int] = []
    try:
        home, device = _home(workspace_fd, project, opened)
        at = f"{MOUNT}/{project}"
        if not conversation:
            again = os.dup(home)
            opened.append(again)
            binds = ["--perms", "0755", "--dir", MOUNT, "--bind-fd", str(again), at]
            return Worktree(tree=home, binds=binds, fds=opened)
        state = _state(home, device, conversation, ids, opened)
        view = _worktree(home, device, project, conversation, opened)
        view.binds += ["--perms", "0755", "--dir", f"{at}/state",
                       "--bind-fd", str(state), f"{at}/state/{conversation}"]  # fmt: skip
        return view
    except BaseException:
        for fd in opened:
            os.close(fd)
        raise


def _state(home: int, device: int, conversation: str, ids: tuple[int, int] | None,
           opened: list[int]) -> int:  # fmt: skip
    """``state/<conversation>``, made if missing (the owner's), and a private index kept
    at the layout's earlier place (``state/<conversation>.index``) moved into it."""
    opened.append(_open(home, "state", device, stat.S_IFDIR))
    parent = opened[-1]
    try:
        os.mkdir(conversation, 0o700, dir_fd=parent)
    except FileExistsError:
        made = False
    else:
        made = True
    opened.append(_open(parent, conversation, device, stat.S_IFDIR))
    state = opened[-1]
    if made:
        if ids is not None:
            os.chown(f"/proc/self/fd/{state}", *ids)
        with contextlib.suppress(FileNotFoundError):
            os.rename(f"{conversation}.index", "index", src_dir_fd=parent, dst_dir_fd=state)
    return state


def path_binds(projects: str, project: str, conversation: str) -> list[str]:
    """The same view for a server without a broker, whose bash sandbox binds by path:
    these paths are below the projects directory, which no sandbox of the user's can
    change (only the host's or a one-shot's code writes there)."""
    at = f"{MOUNT}/{project}"
    repo = f"{projects}/{project}/repo.git"
    return [
        "--perms", "0755", "--dir", MOUNT,
        "--perms", "0755", "--dir", at,
        "--perms", "0755", "--dir", f"{at}/trees",
        "--bind", repo, f"{at}/repo.git",
        "--ro-bind", f"{repo}/config", f"{at}/repo.git/config",
        "--ro-bind", f"{repo}/hooks", f"{at}/repo.git/hooks",
        "--bind", f"{repo}/objects", f"{at}/repo.git/objects",
        "--ro-bind", f"{repo}/objects/info", f"{at}/repo.git/objects/info",
        "--tmpfs", f"{at}/repo.git/worktrees",
        "--bind", f"{repo}/worktrees/{conversation}", f"{at}/repo.git/worktrees/{conversation}",
        *(arg for name in POINTERS for arg in (
            "--ro-bind", f"{repo}/worktrees/{conversation}/{name}",
            f"{at}/repo.git/worktrees/{conversation}/{name}")),
        "--remount-ro", f"{at}/repo.git/worktrees",
        "--bind", f"{projects}/{project}/trees/{conversation}", f"{at}/trees/{conversation}",
    ]  # fmt: skip
