"""The Terminal panel's shells: one tmux session per conversation, an interactive shell in
the conversation's workspace (its worktree in a project), in the owner's sandbox.

The shell starts the way a CLI agent does (agent/sandbox/cli_spawn.py): under a broker,
the server asks it for a ticket and the pane's first process
(agent/sandbox/terminal_attach.py) presents it with a terminal of its own, so the broker
starts the sandbox as the owner, in their cgroup, with the bash tool's confinement and
network policy; on a server that is not root, tmux starts that same bwrap line itself.
The session is tmux's, not this process's: it outlives a reload, and any process of the
deployment reaches it by tmux's socket. Across a restart of the server the session and its
screen stay (agent/sandbox/drop.py keeps the service user's tmux server), but the broker
ends the sandboxes it started when it stops: the next key starts a new shell.

What the pane shows is piped (``pipe-pane``) into a bounded stream
(agent/core/terminal/stream.py) that the pages follow. An owner keeps at most
``HARNESS_TERMINALS_PER_USER`` sessions: starting one more ends their least recently used.
A session ends with its conversation. A shell that exited leaves its pane (its last
words); the next key or resize starts a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from agent.core.cli_agents.tmux import CLEAN_ENV, Tmux, TmuxError, tmux_path
from agent.core.terminal import stream
from agent.core.tools.bwrap import bwrap_path, sandbox_argv
from agent.models import Conversation
from agent.runs import egress, previews
from agent.runs.cli_sessions import PREFIX as AGENT_PREFIX
from agent.runs.cli_sessions import sessions
from agent.runs.groups import announce_terminal
from agent.runs.workspaces import conversation_workspace, sandbox_ids
from agent.sandbox import drop, preview_mounts
from agent.sandbox.terminal_attach import PROGRAM

PREFIX = "ht"  # the Terminal panel's sessions (the CLI agents' are "ah")
MIN_SIZE, MAX_SIZE = 2, 500  # columns and rows a resize may ask for
MAX_INPUT = 4096  # characters of one terminal_input frame
DEFAULT_SIZE = (80, 24)
SIZE_FILE = "size"
USER_OPTION = "@harness_user"
ALIVE_FOR = 1.0  # seconds a shell seen alive is taken to be
READY_WITHIN = 10.0  # seconds keys wait for a starting shell's prompt


class TerminalRefused(Exception):
    pass


@dataclass(frozen=True)
class Pane:
    """One terminal a page shows: ``shell`` (the Terminal panel) or ``agent`` (a CLI's)."""

    name: str
    target: str
    directory: str  # its stream's directory (agent/core/terminal/stream.py)


def _state() -> Path:
    return Path(settings.HARNESS_AGENT_STATE)


def session_name(conversation_id) -> str:
    return f"{PREFIX}-{conversation_id}"


def shell_pane(conversation_id) -> Pane:
    key = str(conversation_id)
    return Pane("shell", f"={session_name(key)}:", str(_state() / "terminals" / key))


def agent_pane(conversation_id) -> Pane:
    key = str(conversation_id)
    return Pane("agent", f"={AGENT_PREFIX}-{key}:", str(_state() / "sessions" / key / "screen"))


def panes(conversation) -> list[Pane]:
    """What a page of ``conversation`` shows: its shell, and its CLI agent's pane."""
    found = [shell_pane(conversation.id)]
    if conversation.agent != "harness":
        found.append(agent_pane(conversation.id))
    return found


def tmux() -> Tmux:
    return sessions.tmux()


def read_size(pane: Pane) -> tuple[int, int] | None:
    try:
        cols, rows = Path(pane.directory, SIZE_FILE).read_text().split()
        return int(cols), int(rows)
    except (OSError, ValueError):
        return None


def _write_size(pane: Pane, cols: int, rows: int) -> None:
    os.makedirs(pane.directory, mode=0o700, exist_ok=True)
    temporary = Path(pane.directory, f".{SIZE_FILE}")
    temporary.write_text(f"{cols} {rows}")
    os.replace(temporary, Path(pane.directory, SIZE_FILE))


def valid_size(cols, rows) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) and MIN_SIZE <= v <= MAX_SIZE
               for v in (cols, rows))  # fmt: skip


class Terminals:
    def __init__(self) -> None:
        self._starting: dict[str, asyncio.Lock] = {}
        self._seen: dict[str, float] = {}
        self._ready: dict[str, str] = {}  # shells just started: their stream's instance

    async def alive(self, conversation_id) -> bool:
        name = session_name(conversation_id)
        t = tmux()
        return await t.has_session(name) and not await t.pane_dead(f"={name}:")

    async def ensure(self, conversation_id, owner_id: int, size=None) -> Pane:
        """The conversation's shell, started when it has none (or it exited)."""
        if tmux_path() is None:
            raise TerminalRefused("tmux is not installed on the server.")
        key = str(conversation_id)
        pane = shell_pane(key)
        # Typing is a frame per key: a shell seen alive a moment ago is not asked again.
        if time.monotonic() - self._seen.get(key, -ALIVE_FOR) < ALIVE_FOR:
            return pane
        lock = self._starting.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                if not await self.alive(key):
                    cols, rows = size or read_size(pane) or DEFAULT_SIZE
                    await self._start(key, owner_id, pane, cols, rows)
        finally:
            if not lock.locked() and self._starting.get(key) is lock:
                del self._starting[key]
        self._seen[key] = time.monotonic()
        if len(self._seen) > 1000:  # keep only the recent ones
            self._seen = {k: t for k, t in self._seen.items() if time.monotonic() - t < ALIVE_FOR}
        return pane

    async def _start(self, key: str, owner_id: int, pane: Pane, cols: int, rows: int) -> None:
        t = tmux()
        name = session_name(key)
        await t.kill_session(name)  # an exited shell's pane
        await self._make_room(owner_id)
        # The conversation's own socket of the egress proxy (None: no network at all).
        route = await egress.socket_for(owner_id, key)
        command = await asyncio.to_thread(_command, key, owner_id, route)
        instance = await asyncio.to_thread(stream.new_instance, pane.directory)
        self._ready[key] = instance
        await asyncio.to_thread(_write_size, pane, cols, rows)
        pipe = stream.pipe_command(sys.executable, str(settings.BASE_DIR), instance)
        try:
            # One chain: the stream records the pane from its first byte.
            await t.run("start-server", ";", "set-option", "-g", "remain-on-exit", "on", ";",
                        "new-session", "-d", "-s", name, "-n", "shell", "-c",
                        str(settings.BASE_DIR), "-x", str(cols), "-y", str(rows), "--",
                        *command, ";",
                        "set-option", "-t", name, USER_OPTION, str(int(owner_id)), ";",
                        "set-option", "-t", name, "history-limit", "5000", ";",
                        "pipe-pane", "-O", "-t", f"={name}:", pipe)  # fmt: skip
        except TmuxError as exc:
            if "duplicate session" not in str(exc):  # another process started it just now
                raise TerminalRefused(f"The terminal could not start: {exc}") from None
        await announce_terminal(key)

    async def _make_room(self, owner_id: int) -> None:
        """The owner's sessions beyond the limit end, least recently used first."""
        out = await tmux().run("list-sessions", "-F",
                               f"#{{session_name}} #{{{USER_OPTION}}} #{{window_activity}}",
                               check=False)  # fmt: skip
        mine = []
        for line in out.splitlines():
            name, _, rest = line.partition(" ")
            user, _, activity = rest.partition(" ")
            if name.startswith(PREFIX + "-") and user == str(int(owner_id)):
                mine.append((int(activity) if activity.isdigit() else 0, name))
        mine.sort()
        while len(mine) >= settings.HARNESS_TERMINALS_PER_USER:
            _, name = mine.pop(0)
            await self.end(name.removeprefix(PREFIX + "-"))

    async def send(self, conversation_id, owner_id: int, data: str) -> None:
        """Keys typed into the shell, as they are (no key names, no newline added)."""
        if len(data) > MAX_INPUT:
            raise TerminalRefused(f"At most {MAX_INPUT} characters of input at a time.")
        for attempt in (1, 2):
            pane = await self.ensure(conversation_id, owner_id)
            await self._until_ready(str(conversation_id))
            buffer = f"harness-t{os.urandom(6).hex()}"
            try:
                await tmux().run("load-buffer", "-b", buffer, "-", ";",
                                 "paste-buffer", "-d", "-r", "-b", buffer, "-t", pane.target,
                                 stdin=data.encode("utf-8", "replace"))  # fmt: skip
                return
            except TmuxError:
                self._seen.pop(str(conversation_id), None)  # gone since: start it again
                if attempt == 2:
                    raise

    async def _until_ready(self, key: str) -> None:
        """Keys for a shell that is only starting wait for its first output (its prompt):
        typed earlier, they would reach a terminal not yet set up, and be lost."""
        instance = self._ready.pop(key, None)
        if instance is None:
            return
        first = os.path.join(instance, stream.file_name(0))
        deadline = time.monotonic() + READY_WITHIN
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if os.path.getsize(first) > 0:
                    return
            await asyncio.sleep(0.05)

    async def resize(self, conversation_id, owner_id: int, cols: int, rows: int) -> None:
        if not valid_size(cols, rows):
            raise TerminalRefused(
                f"terminal_resize needs whole 'cols' and 'rows' from {MIN_SIZE} to {MAX_SIZE}."
            )
        pane = await self.ensure(conversation_id, owner_id, (cols, rows))
        # The size first: a page that reads it resizes before it draws the redraw.
        await asyncio.to_thread(_write_size, pane, cols, rows)
        await tmux().run("resize-window", "-t", pane.target, "-x", str(cols), "-y", str(rows))

    async def end(self, conversation_id) -> None:
        key = str(conversation_id)
        self._seen.pop(key, None)
        self._ready.pop(key, None)
        await tmux().kill_session(session_name(key))
        await asyncio.to_thread(stream.remove, shell_pane(key).directory)
        await asyncio.to_thread(previews.remove, key)


terminals = Terminals()


def _command(key: str, owner_id: int, route: str | None = None) -> list[str]:
    """The pane's command: the sandbox's shell (blocking: the workspace, the ticket);
    ``route``: the egress proxy's socket, the shell's only way out."""
    conversation = (Conversation.objects.filter(pk=key, owner_id=owner_id)
                    .only("id", "owner_id", "project_id", "branch").first())  # fmt: skip
    if conversation is None:
        raise TerminalRefused("This conversation is not available.")
    workspace = conversation_workspace(conversation)
    attach = [sys.executable, "-m", "agent.sandbox.terminal_attach"]
    # The preview forwarder starts first, apart from the shell; the shell's start is as it was.
    program = preview_mounts.START + PROGRAM
    preview_dir = str(previews.directory(key))
    if workspace.sandbox is not None:
        home = key.replace("-", "")
        workspace.sandbox.cli_home(home, {})  # the shell's HOME, the conversation's own
        ticket = workspace.sandbox.cli_ticket(key, program, {}, None, None, route, preview_dir)
        return [*attach, str(drop.attach_socket()), ticket]
    if sandbox_ids(owner_id) is not None:
        # Root without a broker (print mode, an in-process test): nothing may start a
        # shell as root, and only the broker starts one as the user.
        raise TerminalRefused("The terminal needs a server that has started its broker.")
    bwrap = bwrap_path()
    if bwrap is None:
        raise TerminalRefused("bubblewrap (bwrap) is not installed: the terminal needs it.")
    argv = sandbox_argv(bwrap, 0, program, egress=route)
    at = argv.index("--bind-fd")
    argv[at : at + 3] = ["--bind", str(workspace.root), "/workspace"]
    at = argv.index("--")
    argv[at:at] = [*workspace.sandbox_binds, *preview_mounts.binds(["--bind", preview_dir]),
                   "--setenv", "TERM", "xterm-256color"]  # fmt: skip
    return [*attach, "--local", "--", *argv]


def end_sync(conversation_id) -> None:
    """End a conversation's shell from synchronous code (deleting it)."""
    path = tmux_path()
    socket = _state() / "tmux.sock"
    if path is not None and socket.exists():
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run([path, "-S", str(socket), "kill-session", "-t",
                            f"={session_name(conversation_id)}"], capture_output=True,
                           timeout=10, check=False, env=CLEAN_ENV)  # fmt: skip
    stream.remove(shell_pane(conversation_id).directory)
    previews.remove(conversation_id)
