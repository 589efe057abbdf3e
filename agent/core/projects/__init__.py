"""Projects on disk: a bare repository and a git worktree per conversation, checkpoints of
a worktree's whole tree, and what is read from them (changes, commits, archives).

Everything here runs as the project's owner, inside their sandbox (the user's file host,
agent/sandbox/host.py, or a one-shot sandbox: agent/sandbox/projects.py), on paths under
one fixed root (``MOUNT``) that every sandbox using a project shows at the same place, so
git's absolute back-pointers between a repository and its worktrees hold in all of them.
"""

from agent.core.projects.layout import MOUNT, PROJECTS_DIR, Layout, LayoutError

__all__ = ["MOUNT", "PROJECTS_DIR", "Layout", "LayoutError"]
