"""Where a project's repository, its worktrees and their private state live.

``<root>/<project>/repo.git``                 the bare repository (hooks/ kept empty)
``<root>/<project>/trees/<conversation>``     a conversation's worktree
``<root>/<project>/state/<conversation>/index``  its checkpoints' private index
``<root>/<project>/state/git``                 Harness's git directory for the repository

``root`` is ``MOUNT`` in every sandbox; on disk it is the owner's workspace's
``PROJECTS_DIR``, hidden from the file tools and from plain conversations' sandboxes. Names
are the ids' 32 hex digits, never a user-chosen string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MOUNT = "/projects"
PROJECTS_DIR = ".harness-projects"
HEX = re.compile(r"^[0-9a-f]{32}$")


class LayoutError(ValueError):
    pass


def hex_id(value) -> str:
    text = str(value).replace("-", "").lower()
    if not HEX.match(text):
        raise LayoutError("not an id")
    return text


@dataclass(frozen=True)
class Layout:
    root: str
    project: str
    conversation: str = ""

    @classmethod
    def of(cls, root: str, project, conversation=None) -> Layout:
        return cls(root, hex_id(project), hex_id(conversation) if conversation else "")

    @property
    def home(self) -> str:
        return f"{self.root}/{self.project}"

    @property
    def repo(self) -> str:
        return f"{self.home}/repo.git"

    @property
    def imported(self) -> str:
        """Where an uploaded archive is unpacked before its first commit (then removed)."""
        return f"{self.home}/import"

    def _need_conversation(self) -> str:
        if not self.conversation:
            raise LayoutError("no conversation named")
        return self.conversation

    @property
    def tree(self) -> str:
        return f"{self.home}/trees/{self._need_conversation()}"

    @property
    def tree_git_dir(self) -> str:
        return f"{self.repo}/worktrees/{self._need_conversation()}"

    @property
    def state(self) -> str:
        """The conversation's private state: the one directory of ``state`` its
        operations' sandbox shows (agent/sandbox/project_mounts.py)."""
        return f"{self.home}/state/{self._need_conversation()}"

    @property
    def index(self) -> str:
        return f"{self.state}/index"

    @property
    def branch(self) -> str:
        return f"harness/{self._need_conversation()[:8]}"

    @property
    def checkpoints_ref(self) -> str:
        return f"refs/harness/checkpoints/{self._need_conversation()}/head"
