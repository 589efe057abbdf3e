"""The project operations by name: what the server asks a user's sandbox to do (the file
host's ``project`` operation, or a one-shot sandbox), with JSON arguments. The answer is
JSON, with bytes beside it for an archive."""

from __future__ import annotations

from agent.core.git import GitError
from agent.core.projects import checkpoints, pinned, repo
from agent.core.projects.layout import Layout, LayoutError

NETWORK = (("protocol.http.allow", "always"), ("protocol.https.allow", "always"))
MAX_ARGS = 64
# Operations on the projects directory itself (a project's directory made or removed),
# whose sandbox shows it whole: they read no repository an agent has had. Every other
# runs where only its project, or its conversation, is (agent/sandbox/projects.py).
WHOLE = frozenset({"prepare", "create", "delete"})
# Operations on a project's repository and its worktrees' homes (an import's first commit,
# a worktree made or removed), whose sandbox shows the project's directory.
PROJECT = frozenset({"create_from_import", "add_worktree", "remove_worktree"})


def scope(name: str, args: dict) -> tuple[str, str]:
    """The project and the conversation (or "") an operation's sandbox shows."""
    if not isinstance(args, dict):
        raise LayoutError("arguments must be an object")
    conversation = args.get("conversation") if name not in PROJECT else None
    layout = Layout.of("/", args.get("project"), conversation)
    return layout.project, layout.conversation


# What a caller may add to git's environment: never configuration, programs or paths.
ENV_PREFIXES = ("GIT_AUTHOR_", "GIT_COMMITTER_")


def run(root: str, name: str, args: dict) -> tuple[dict, bytes]:
    if not isinstance(args, dict):
        raise LayoutError("arguments must be an object")
    layout = Layout.of(root, args.get("project"), args.get("conversation"))
    if name == "create":
        return repo.create(layout), b""
    if name == "prepare":
        return repo.prepare(layout), b""
    if name == "create_from_import":
        return repo.create_from_import(layout), b""
    if name == "add_worktree":
        return repo.add_worktree(layout, args.get("base")), b""
    if name == "remove_worktree":
        return repo.remove_worktree(layout), b""
    if name == "delete":
        return repo.delete(layout), b""
    if name == "checkpoint":
        return {"checkpoint": checkpoints.checkpoint(layout, _commit(args, "base"))}, b""
    if name == "restore":
        return checkpoints.restore(layout, _commit(args, "base"), _commit(args, "target")), b""
    if name == "changes":
        return checkpoints.changes(layout, _commit(args, "base")), b""
    if name == "commit":
        return checkpoints.commit(layout, _text(args, "message", 65536), _text(args, "name", 200),
                                  _text(args, "email", 200)), b""  # fmt: skip
    if name == "archive":
        return {}, checkpoints.archive(layout)
    if name == "git":
        return git_command(layout, args), b""
    raise LayoutError(f"unknown project operation {name!r}")


def git_command(layout: Layout, args: dict) -> dict:
    """The seam for other git work: one hardened git command line on the project's
    repository (in the conversation's worktree when one is named). ``network``: http(s)
    transports allowed (nothing else is)."""
    argv = args.get("args")
    if (not isinstance(argv, list) or not 0 < len(argv) <= MAX_ARGS
            or not all(isinstance(a, str) and "\0" not in a for a in argv)):  # fmt: skip
        raise LayoutError("args must be a list of strings")
    extra = NETWORK if args.get("network") is True else ()
    env = args.get("env") or {}
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and k.startswith(ENV_PREFIXES) and isinstance(v, str) and "\0" not in v
        for k, v in env.items()
    ):
        raise LayoutError("env may only name an author or a committer")
    pin = pinned.worktree if layout.conversation else pinned.repository
    git = pin(layout, extra_config=extra, timeout=float(args.get("timeout") or 60))
    result = git.run(*argv, work_tree=layout.tree if layout.conversation else None, check=False,
                     extra=env)  # fmt: skip
    return {"code": result.code, "out": result.out.decode(errors="replace"), "err": result.err}


def _commit(args: dict, key: str) -> str:
    value = args.get(key)
    if (
        not isinstance(value, str)
        or len(value) != 40
        or not all(c in "0123456789abcdef" for c in value)
    ):
        raise GitError(f"{key} must be a commit id")
    return value


def _text(args: dict, key: str, limit: int) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value.strip() or len(value) > limit or "\0" in value:
        raise GitError(f"{key} must be a non-empty string of at most {limit} characters")
    return value


# Errors across the sandbox's socket: a code and git's message, the same class after.
ERRORS = {
    "nothing_to_commit": checkpoints.NothingToCommit,
    "unknown_checkpoint": checkpoints.UnknownCheckpoint,
    "git": GitError,
}


def error_code(exc: BaseException) -> str | None:
    for code, cls in ERRORS.items():
        if isinstance(exc, cls):
            return code
    return "git" if isinstance(exc, LayoutError) else None


def error_from(code: str, message: str) -> GitError | None:
    cls = ERRORS.get(code)
    return cls(message) if cls is not None else None
