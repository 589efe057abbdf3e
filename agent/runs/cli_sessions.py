"""The tmux sessions of this process's CLI agents.

One session per conversation: started on its first prompt, reused by the next, ended when
the conversation is deleted, when unused for HARNESS_AGENT_IDLE_MINUTES, and when the
server stops. tmux's own server outlives ours, but a session left by an earlier process is
not re-attached: its model credential and gateway socket died with that process. The next
prompt starts the CLI anew, resuming the CLI's own session; the orphan scan ends the old
one. A run that a crash cut short is marked interrupted by the lease reaper, as for the
built-in agent.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings

from agent.core.cli_agents.detect import available_agents, detect_cached
from agent.core.cli_agents.providers import PROVIDERS, Provider
from agent.core.cli_agents.session import CliSession, SessionSpec, session_name
from agent.core.cli_agents.tmux import CLEAN_ENV, Tmux, tmux_path
from agent.models import Conversation
from agent.runs import previews
from agent.runs.claim import CLI_NEEDS_MODEL
from agent.runs.groups import announce_terminal
from agent.runs.llm_gateway import open_gateway
from agent.runs.workspaces import conversation_workspace, sandbox_ids, workspace_for
from agent.sandbox import drop, preview_mounts

log = logging.getLogger(__name__)

PREFIX = "ah"  # the sessions' prefix (agent-harness)
REAP_INTERVAL = 30.0
# A CLI's NO_PROXY behind the egress proxy: the sandbox's own loopback (its gateway's port)
LOOPBACK = "127.0.0.1,localhost"


def agent_environ() -> dict[str, str]:
    """What provider lookup sees: PATH and the configured HARNESS_AGENT_<NAME>_COMMANDs."""
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for name, command in settings.HARNESS_AGENT_COMMANDS.items():
        if command:
            environ[PROVIDERS[name].command_env_name()] = command
    return environ


async def agents() -> list[dict]:
    """``GET /api/agents``: every CLI agent, available or not (and why not). None is
    without a model key: the offline demo answers only the built-in agent."""
    infos = await available_agents(agent_environ())
    if not settings.ANTHROPIC_API_KEY:
        return [{"name": i.name, "available": False, "version": i.version,
                 "reason": CLI_NEEDS_MODEL} for i in infos]  # fmt: skip
    return [{"name": i.name, "available": i.available, "version": i.version,
             **({"reason": i.reason} if i.reason else {})} for i in infos]  # fmt: skip


async def check_available(name: str) -> str | None:
    """None when a conversation may use ``name``; else why not (400 agent_unavailable)."""
    if name == "harness":
        return None
    provider = PROVIDERS.get(name)
    if provider is None:
        return f"Unknown agent {name[:40]!r}: use harness, {', '.join(PROVIDERS)}."
    if not settings.ANTHROPIC_API_KEY:
        return CLI_NEEDS_MODEL
    if tmux_path() is None:
        return "tmux is not installed on the server, so CLI agents cannot run."
    info = await detect_cached(provider, agent_environ())
    return None if info.available else f"{name} is not available: {info.reason}."


def _socket() -> str:
    state = Path(settings.HARNESS_AGENT_STATE)
    state.mkdir(parents=True, exist_ok=True)
    return str(state / "tmux.sock")


class Entry:
    def __init__(self, session: CliSession, gateway, provider: Provider):
        self.session, self.gateway, self.provider = session, gateway, provider


class CliSessions:
    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}
        self._reaper: asyncio.Task | None = None

    def tmux(self) -> Tmux:
        return Tmux(_socket())

    def _state_dir(self, conversation_id: str) -> str:
        return str(Path(settings.HARNESS_AGENT_STATE) / "sessions" / conversation_id)

    async def session_for(self, conversation_id: str, owner_id: int, agent: str,
                          approval: str = "auto", model: str | None = None) -> Entry:  # fmt: skip
        """The conversation's live session: this process's, else a new one (resuming the
        CLI's own session when there was one). A changed
        tool approval or model restarts the CLI (command-line flags), resuming its session."""
        self._ensure_reaper()
        key = str(conversation_id)
        entry = self._entries.get(key)
        if (
            entry is not None
            and entry.provider.name == agent
            and entry.session.spec.approval == approval
            and await entry.session.alive()
        ):
            return entry  # fmt: skip
        if entry is not None:
            await self.end(key)
        provider = PROVIDERS[agent]
        executable = provider.find(agent_environ())
        if executable is None:
            raise RuntimeError(f"{agent} is not installed")
        workspace = await asyncio.to_thread(_workspace, key, owner_id)
        if workspace.sandbox is None and sandbox_ids(owner_id) is not None:
            # Root without a broker (print mode, an in-process test): nothing may start a
            # CLI as root, and only the broker starts one as the user.
            raise RuntimeError("CLI agents need a server that has started its broker")
        egress = await workspace.egress() if workspace.egress else None
        gateway = await open_gateway(key, owner_id)
        env = dict(gateway.env)
        if egress is not None:
            # Its model traffic goes to the gateway's port on the sandbox's own loopback,
            # past the proxy; everything else through it.
            env["NO_PROXY"] = LOOPBACK
        state_dir = self._state_dir(key)
        marker = Path(state_dir) / "cli-session"
        resume = await asyncio.to_thread(lambda: marker.read_text().strip() if marker.exists()
                                         else None)  # fmt: skip
        spec = SessionSpec(
            conversation_id=key, provider=provider, executable=executable,
            workspace=str(workspace.root),
            # The CLI's HOME: one per conversation (never shared across conversations);
            # under a broker, inside the user's own workspace storage, made by the user.
            home=str(Path(settings.HARNESS_AGENT_STATE) / "homes" / key),
            state_dir=state_dir, env=env, extra_bwrap=gateway.bwrap_args(),
            wrap=gateway.wrap_command,
            resume=resume or None, prefix=PREFIX,
            approval=approval, model=model, sandbox=workspace.sandbox,
            attach=[sys.executable, "-m", "agent.sandbox.attach", str(drop.attach_socket())],
            gateway_socket=gateway.socket_path, egress_socket=egress,
            app_dir=str(settings.BASE_DIR),
        )  # fmt: skip
        if workspace.sandbox is not None:
            # What the CLI serves (a dev server it left running) is previewed like the
            # terminal's: a forwarder of its own in its sandbox.
            spec.preview_dir = str(await asyncio.to_thread(previews.directory, key, previews.AGENT))
            spec.before = preview_mounts.START
        session = CliSession(self.tmux(), spec)
        try:
            await session.start()
        except BaseException:
            with contextlib.suppress(Exception):
                await gateway.close()
            raise
        entry = Entry(session, gateway, provider)
        self._entries[key] = entry
        await announce_terminal(key)  # its pane, for the pages
        return entry

    def remember(self, conversation_id: str, marker: str | None) -> None:
        """Keep what resumes the CLI's session in a new process (blocking: a small write)."""
        if marker:
            path = Path(self._state_dir(str(conversation_id))) / "cli-session"
            path.write_text(marker)

    async def end(self, conversation_id: str) -> None:
        entry = self._entries.pop(str(conversation_id), None)
        if entry is not None:
            with contextlib.suppress(Exception):
                await entry.gateway.close()
        await self.tmux().kill_session(session_name(PREFIX, str(conversation_id)))

    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap())
            if not self._exit_hook:
                atexit.register(self.shutdown_sync)
                self._exit_hook = True

    _exit_hook = False

    async def _reap(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.reap_idle()
                await self.reap_orphans()
            await asyncio.sleep(REAP_INTERVAL)

    async def reap_orphans(self) -> list[str]:
        """The start-up scan: sessions of ours that no process uses (left by a
        server that stopped or crashed) end once tmux saw no activity in them for the idle
        time; until then the conversation's next prompt may re-attach to one."""
        from agent.runs.manager import runs

        limit = settings.HARNESS_AGENT_IDLE_MINUTES * 60
        out = await self.tmux().run("list-sessions", "-F", "#{session_name} #{session_activity}",
                                    check=False)  # fmt: skip
        ended = []
        for line in out.splitlines():
            name, _, activity = line.partition(" ")
            key = name.removeprefix(PREFIX + "-")
            if not name.startswith(PREFIX + "-") or key in self._entries or runs.is_running(key):
                continue
            if activity.isdigit() and time.time() - int(activity) >= limit:
                await self.tmux().kill_session(name)
                ended.append(key)
        return ended

    async def reap_idle(self, busy: set[str] | None = None) -> list[str]:
        """End the sessions unused for HARNESS_AGENT_IDLE_MINUTES (not one running)."""
        from agent.runs.manager import runs

        limit = settings.HARNESS_AGENT_IDLE_MINUTES * 60
        ended = []
        for key, entry in list(self._entries.items()):
            if runs.is_running(key) or (busy and key in busy):
                continue
            if time.monotonic() - entry.session.last_used >= limit:
                await self.end(key)
                ended.append(key)
        return ended

    async def shutdown(self) -> None:
        """The server stops: end every session of this process (they hold a per-run
        credential and a user's processes)."""
        for key in list(self._entries):
            with contextlib.suppress(Exception):
                await self.end(key)

    def shutdown_sync(self) -> None:
        """At the process's exit: end this process's sessions (their runs are over; a
        session outliving its server keeps a user's processes for nothing)."""
        for key in list(self._entries):
            end_session_sync(key)
        self._entries.clear()


sessions = CliSessions()


def end_session_sync(conversation_id) -> None:
    """End a conversation's tmux session from synchronous code (deleting it), whichever
    process started it: tmux's server is the deployment's, reached by its socket."""
    path = tmux_path()
    socket = Path(settings.HARNESS_AGENT_STATE) / "tmux.sock"
    if path is None or not socket.exists():
        return
    name = session_name(PREFIX, str(conversation_id))
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run([path, "-S", str(socket), "kill-session", "-t", f"={name}"],
                       capture_output=True, timeout=10, check=False, env=CLEAN_ENV)  # fmt: skip


def _workspace(conversation_id: str, owner_id: int):
    """The conversation's workspace: its project's worktree, or its owner's own."""
    conversation = (Conversation.objects.filter(pk=conversation_id, owner_id=owner_id)
                    .only("id", "owner_id", "project_id", "branch").first())  # fmt: skip
    return workspace_for(owner_id) if conversation is None else conversation_workspace(conversation)
