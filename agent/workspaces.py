"""Per-user workspaces under HARNESS_WORKSPACES.

One workspace per user, not per conversation: it is "that person's own workspace", the
way a developer keeps one checkout across many chats; files the agent made yesterday are
there today, in any conversation. Directory names are the user's numeric id, never a
user-chosen string. When the server runs as root the workspace belongs to an unprivileged
uid, so the bash sandbox (which runs as the workspace owner) is bound by process limits.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

from .tools import Workspace

SANDBOX_UID = 65534  # nobody: owns workspaces when the server runs as root


def workspace_path(user_id: int) -> Path:
    return Path(settings.HARNESS_WORKSPACES) / str(int(user_id))


def workspace_for(user_id: int) -> Workspace:
    path = workspace_path(user_id)
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
        if os.geteuid() == 0:
            os.chown(path, SANDBOX_UID, SANDBOX_UID)
    return Workspace(path)
