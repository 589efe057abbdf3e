"""A project's network operations: the clone that makes it, a push of a branch.

Each runs git as the project's owner, in their sandbox (once the server has dropped root,
a clone by the owner's file host and a push in a sandbox the broker starts; a root server
without a broker runs the broker's bwrap command line itself),
reaching the remote only through a git relay of its own (agent/runs/git_relay.py), which
adds the owner's credential for the remote's host. What git says comes back scrubbed:
the remote's URL in place of the relay's, never a credential.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from agent.core.egress_rules import EgressRefused, valid_host
from agent.core.tools.bwrap import bwrap_path
from agent.core.tools.process import ProcessResult, run_process
from agent.core.tools.workspace import PathError
from agent.models import Project
from agent.runs import git_credentials
from agent.runs.git_relay import GitRelay
from agent.runs.workspaces import sandbox_ids, workspace_for
from agent.sandbox import git_spawn
from agent.sandbox.client import BrokerError
from agent.sandbox.spawn import SPAWN_ENV, limits

log = logging.getLogger(__name__)

MESSAGE_CAP = 4000
REJECTED = re.compile(r"non-fast-forward|fetch first|stale info")
HASH = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


class GitFailed(Exception):
    """git failed; ``message`` is what it said (scrubbed), ``rejected``: a push refused
    as not a fast-forward."""

    def __init__(self, message: str, rejected: bool = False):
        super().__init__(message)
        self.message, self.rejected = message, rejected


@dataclass(frozen=True)
class Pushed:
    remote: str
    branch: str
    commit: str


def url_problem(url) -> str | None:
    """Why ``url`` cannot be a project's remote (None: it can): http(s) only, a host, no
    credential inside it (that goes to PUT /api/credentials/git/<host>)."""
    if not isinstance(url, str) or not url or len(url) > 1990:
        return "'git_url' must be an http:// or https:// URL"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        return "'git_url' is not a valid URL"
    if parts.scheme not in ("http", "https") or not git_spawn.URL.match(url):
        return "'git_url' must be an http:// or https:// URL (no ssh, file or ext)"
    if parts.username is not None or parts.password is not None:
        return ("'git_url' must not hold a credential: store it with "
                "PUT /api/credentials/git/<host>")  # fmt: skip
    if not parts.hostname or not valid_host(parts.hostname) or parts.query or parts.fragment:
        return "'git_url' must name a host and a path, without a query or fragment"
    return None


async def _run(owner_id: int, fields: dict, relay: GitRelay) -> ProcessResult:
    fields = {**fields, "seconds": settings.HARNESS_GIT_TIMEOUT}
    workspace = await asyncio.to_thread(workspace_for, owner_id)
    timeout = settings.HARNESS_GIT_TIMEOUT + 30  # the forwarder stops git first, cleans up
    if workspace.sandbox is not None:
        try:
            if fields["action"] == "clone":  # by the user's file host, already running
                return await workspace.sandbox.clone(fields, relay.socket_path, timeout)
            return await workspace.sandbox.git(fields, relay.socket_path, timeout,
                                               git_spawn.OUTPUT_CAP)  # fmt: skip
        except (PathError, BrokerError) as exc:  # the host refused, failed or is gone
            raise GitFailed(str(exc)) from None
    bwrap = bwrap_path()
    if bwrap is None:
        raise GitFailed("git needs the sandbox, and bubblewrap (bwrap) is not installed")
    spec = git_spawn.validate(fields)
    root = os.open(workspace.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    sock = os.open(relay.socket_path, os.O_PATH | os.O_CLOEXEC)
    repo = None
    try:
        repo = git_spawn.repository_fd(root, spec, fields["project"])
        python = os.path.realpath(sys.executable)
        prefix = os.path.realpath(sys.base_prefix)
        if not python.startswith(prefix + "/"):
            python = os.path.join(prefix, "bin", f"python{sys.version_info[0]}")
        argv = git_spawn.argv(bwrap, spec, root, sock, sandbox_ids(owner_id), python, prefix,
                              str(settings.BASE_DIR), repo)  # fmt: skip
        bounds = limits(None, settings.HARNESS_SANDBOX_PIDS)
        passed = [root, sock] + ([repo] if repo is not None else [])
        return await run_process(argv, env=SPAWN_ENV, timeout=timeout,
                                 output_cap=git_spawn.OUTPUT_CAP, merge_stderr=True,
                                 pass_fds=passed, preexec_fn=bounds)  # fmt: skip
    except git_spawn.Refused as exc:
        raise GitFailed(str(exc)) from None
    finally:
        os.close(root)
        os.close(sock)
        if repo is not None:
            os.close(repo)


def _said(result: ProcessResult, relay: GitRelay) -> str:
    text = relay.scrub(result.output).strip()
    if relay.problem and relay.problem not in text:
        text = f"{text}\n{relay.problem}".strip()
    if result.timed_out:
        text += f"\ngit did not finish within {settings.HARNESS_GIT_TIMEOUT} s"
    return text[-MESSAGE_CAP:] or "git failed without saying why"


async def clone(project: Project) -> str:
    """The project's remote cloned (bare) into its repository; its default branch."""
    credential = await sync_to_async(git_credentials.for_url)(project.owner_id, project.git_url)
    fields = {"action": "clone", "project": str(project.id), "url": project.git_url,
              "branch": project.default_branch or None}  # fmt: skip
    try:
        async with GitRelay(project.owner_id, project.git_url, credential) as relay:
            result = await _run(project.owner_id, fields, relay)
    except EgressRefused as exc:
        raise GitFailed(str(exc)) from None
    if result.returncode != 0:
        raise GitFailed(_said(result, relay))
    lines = [line for line in result.output.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


async def push(project: Project, branch: str, conversation_id=None) -> Pushed:
    """``branch`` of the project's repository pushed to its remote (same name there);
    ``conversation_id``: the conversation that asked, named in the Egress log."""
    if not project.git_url:
        raise GitFailed("this project has no remote to push to")
    credential = await sync_to_async(git_credentials.for_url)(project.owner_id, project.git_url)
    fields = {"action": "push", "project": str(project.id), "branch": branch}
    relay = GitRelay(project.owner_id, project.git_url, credential, push=True,
                     conversation_id=conversation_id)  # fmt: skip
    try:
        async with relay:
            result = await _run(project.owner_id, fields, relay)
    except EgressRefused as exc:
        raise GitFailed(str(exc)) from None
    said = _said(result, relay)
    if result.returncode != 0:
        rejected = any(line.startswith("!") and REJECTED.search(line) for line in said.splitlines())
        raise GitFailed(said, rejected=rejected)
    commit = next((line for line in result.output.split() if HASH.match(line)), "")
    return Pushed(project.git_url, branch, commit)


async def clone_project(project_id) -> None:
    """Clone and record the outcome: ``ready`` with its default branch, or ``failed``
    with git's message. Nothing half-made is kept (the sandbox removes it)."""
    project = await Project.objects.select_related("owner").aget(pk=project_id)
    try:
        branch = await clone(project)
    except GitFailed as exc:
        project.state, project.error = Project.State.FAILED, exc.message
    except Exception as exc:  # noqa: BLE001 - the project says it failed, not "cloning"
        log.exception("cloning project %s failed", project_id)
        project.state, project.error = Project.State.FAILED, f"the clone failed: {exc}"[:500]
    else:
        project.state, project.default_branch, project.error = Project.State.READY, branch, ""
    await project.asave(update_fields=["state", "default_branch", "error", "updated"])


INTERRUPTED = ("the clone was interrupted (the server stopped while it ran); delete the "
               "project and add it again")  # fmt: skip


def settle_interrupted(owner) -> None:
    """The owner's clones that cannot still be running (their server stopped: the broker
    killed them with it) say so instead of ``cloning`` for ever."""
    grace = timedelta(seconds=settings.HARNESS_GIT_TIMEOUT + 120)
    Project.objects.filter(owner=owner, state=Project.State.CLONING,
                           updated__lt=timezone.now() - grace).update(
        state=Project.State.FAILED, error=INTERRUPTED, updated=timezone.now())  # fmt: skip


_cloning: set[threading.Thread] = set()


def wait_for_clones(timeout: float) -> bool:
    """Whether every clone this process started has ended within ``timeout`` seconds (a
    test's end; a server's stop does not wait: a clone left ``cloning`` is settled)."""
    deadline = time.monotonic() + timeout
    for thread in list(_cloning):
        thread.join(max(0.0, deadline - time.monotonic()))
    return not _cloning


def start_clone(project_id) -> threading.Thread:
    """The clone in the background, on a thread and event loop of its own (the request
    that asked for it answers at once: 201, ``cloning``)."""

    def work() -> None:
        try:
            asyncio.run(clone_project(project_id))
        finally:
            close_old_connections()
            _cloning.discard(thread)

    thread = threading.Thread(target=work, name=f"clone-{project_id}", daemon=True)
    _cloning.add(thread)
    thread.start()
    return thread
