"""The bash sandbox's limits from Django settings, and the start-up report of what binds."""

from __future__ import annotations

import logging
import os

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from agent.core.tools import SandboxLimits
from agent.core.tools.bwrap import bwrap_path
from agent.core.tools.cgroups import sandbox_cgroups

log = logging.getLogger(__name__)


def sandbox_limits() -> SandboxLimits:
    return SandboxLimits(
        pids=settings.HARNESS_SANDBOX_PIDS,
        memory_mb=settings.HARNESS_SANDBOX_MEMORY_MB,
        cgroups=settings.HARNESS_SANDBOX_CGROUPS,
        cgroup_path=settings.HARNESS_CGROUP or "",
    )


INSTALL_BWRAP = (
    "bash sandbox: bubblewrap (bwrap) is not installed, so the agent's bash tool is off: "
    "install it (sudo apt-get install bubblewrap, or `make run` as root) and restart, or set "
    "HARNESS_BASH=off to silence this."
)


def bash_mode(enabled_for_user: bool = True) -> str:
    """The bash tool's mode for a run: HARNESS_BASH, but ``off`` for a user whose bash is
    switched off, and when the sandbox cannot start because bubblewrap is missing (the
    model, the demo's help and the welcome then offer no command that can only fail)."""
    if not enabled_for_user:
        return "off"
    if settings.HARNESS_BASH == "sandbox" and bwrap_path() is None:
        return "off"
    return settings.HARNESS_BASH


def check_at_startup() -> None:
    """Say, once, what the sandbox's limits rest on. Read-only: the cgroups are made when the
    first command runs (a `migrate` must not move the server's processes), and that logs
    again if it then fails."""
    if settings.HARNESS_BASH != "sandbox":
        return
    if bwrap_path() is None:
        log.warning(INSTALL_BWRAP)
        return
    manager = sandbox_cgroups(sandbox_limits())
    complete, text = manager.describe()
    if settings.HARNESS_SANDBOX_CGROUPS == "required" and not complete:
        raise ImproperlyConfigured(f"HARNESS_SANDBOX_CGROUPS=required, but {text}")
    manager.log_status(verified=False)  # a warning naming what only rlimits bind; once
    if os.geteuid() != 0:
        uid = os.geteuid()
        shared = (
            "each user's processes are counted per workspace by cgroups"
            if "pids" in manager.plan().controllers
            else "RLIMIT_NPROC counts them all together, so one user's processes eat into "
            "every other user's limit"
        )
        log.warning(
            "bash sandbox: the server is not root, so every user's sandbox runs as its own "
            "uid %s (not a uid per user): %s. Run the server as root for per-user uids.",
            uid,
            shared,
        )
