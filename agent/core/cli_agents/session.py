"""One CLI agent kept alive in a tmux session for one conversation.

The CLI runs inside the user's bubblewrap sandbox (the bash tool's arguments: only the
workspace writable, no host files, a cleared environment, no network: the model gateway's
socket is the one way out), with the workspace as its working directory and its HOME in
the user's own area (never the server's home). Its structured output reaches the server
through ``pipe-pane`` into a log outside the sandbox, read here from where the last read
stopped; the pane itself is the live terminal.

Session naming: session ``{prefix}-{conversation id}``, window
``{provider}-{4 hex}``; the target is ``{session}:{window}``.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from agent.core.cli_agents.providers import Provider
from agent.core.cli_agents.tmux import Tmux
from agent.core.terminal import stream
from agent.core.tools.bwrap import bwrap_path, sandbox_argv
from agent.core.tools.workspace import Workspace

POLL_INTERVAL = 0.1  # seconds between reads of the pane's log while a prompt runs
READ_CHUNK = 1 << 20
MAX_LINE = 4 << 20  # a longer "line" is dropped: no JSON message of a CLI is that big
HOME_IN_SANDBOX = "/home/agent"
# Where a CLI installed outside /usr is mounted (read-only); named node_modules, so node
# finds the CLI's packages the way it does on the host.
CLI_IN_SANDBOX = "/opt/cli/node_modules"
# Put in front of the CLI: no canonical line editing (a pasted line may be longer than the
# tty's 4 KiB line buffer), no echo (the pane shows the CLI's output, not our JSON), and a
# "ready" on the screen once that holds, then a wait for the server's "go" (sent once it
# saw "ready" and pipe-pane records the pane: no input echoed, no output lost). The CLI
# reads the pane through a pipe: print modes refuse a terminal on stdin.
# The "go" (3 bytes: "go" and Enter) is taken one byte at a time (dd bs=1): without
# canonical mode one read returns all that is waiting, and the shell's `read` took the
# first prompt with it when the prompt came before the shell got there (a busy machine),
# leaving the CLI waiting for a prompt that never came.
READY = "harness-cli-ready"
GO = ("go", "Enter")
PRELUDE = (f"stty -icanon -echo min 1 time 0; echo {READY}; "
           "dd bs=1 count=3 of=/dev/null status=none; cat | ")  # fmt: skip
START_TIMEOUT = 30.0
CAPPED = '{"type":"harness_output_capped"}'  # agent/sandbox/attach.py's line past its cap


class CliExited(Exception):
    """The CLI's process ended (the pane is dead, or the session is gone)."""


def session_name(prefix: str, conversation_id: str) -> str:
    return f"{prefix}-{conversation_id}"


@dataclass
class SessionSpec:
    conversation_id: str
    provider: Provider
    executable: str
    workspace: str  # host path of the user's workspace
    home: str  # host path of the CLI's HOME (the user's area)
    state_dir: str  # host path, outside the sandbox: the pane's log
    env: dict[str, str] = field(default_factory=dict)  # the gateway's (base URL, credential)
    extra_bwrap: list[str] = field(default_factory=list)  # the gateway's bind mounts
    wrap: Callable[[list[str]], list[str]] | None = None  # the gateway's in-sandbox forwarder
    # A server that dropped root: the user's sandbox (agent/sandbox/client.py) makes the
    # home and gives the pane a ticket; ``attach`` is the pane's command before the ticket.
    sandbox: object | None = None
    attach: list[str] = field(default_factory=list)
    gateway_socket: str | None = None
    egress_socket: str | None = None  # the egress proxy's (HARNESS_EGRESS=proxy)
    app_dir: str = "/"
    resume: str | None = None  # the CLI's earlier session to continue
    prefix: str = "ah"
    approval: str = "auto"  # the conversation's tool approval when the session started
    model: str | None = None  # the conversation's model when the session started
    # Under a broker: the directory of the preview forwarder's socket (what the CLI serves
    # is previewed, agent/runs/previews.py) and the shell that starts it before the CLI.
    preview_dir: str | None = None
    before: str = ""


def install_root(executable: str) -> str | None:
    """The directory to mount read-only so the CLI's own files are reachable (an npm
    prefix's ``node_modules``), or None when it lives under /usr (already there)."""
    real = os.path.realpath(executable)
    if real.startswith("/usr/"):
        return None
    parts = Path(real).parts
    if "node_modules" in parts:
        return str(Path(*parts[: parts.index("node_modules") + 1]))
    return str(Path(real).parent)


def cli_program(spec: SessionSpec) -> tuple[str, str | None]:
    """The shell command the sandbox runs (the prelude, then the CLI through the gateway's
    forwarder) and the CLI's install directory to mount read-only (None: under /usr)."""
    executable = spec.executable
    root = install_root(executable)
    if root is not None:
        # Mounted at a fixed place: the host's path may pass through private directories
        # (which bwrap would re-create closed to the sandbox's user).
        executable = CLI_IN_SANDBOX + "/" + os.path.relpath(os.path.realpath(executable), root)
    inner = spec.provider.argv(executable, conversation_id=spec.conversation_id,
                               resume=spec.resume, approval=spec.approval,
                               model=spec.model)  # fmt: skip
    if spec.wrap is not None:
        inner = spec.wrap(inner)
    return spec.before + PRELUDE + shlex.join(inner), root


def cli_env(spec: SessionSpec) -> dict[str, str]:
    return {**spec.provider.env(), **spec.env}


def cli_sandbox(argv: list[str], binds: list[str], env: dict[str, str]) -> list[str]:
    """The bash tool's sandbox arguments ``argv`` made a CLI's: ``binds`` and ``env`` (with
    HOME and a terminal) before its command. Both ways of starting a CLI use it."""
    # A root bwrap makes the parents of its binds (/etc) closed to the sandbox's user; a
    # CLI looks for its settings there (and hangs on EACCES).
    argv = [argv[0], "--perms", "0755", "--dir", "/etc", "--perms", "0755", "--dir", "/etc/ssl",
            *argv[1:]]  # fmt: skip
    extra = list(binds)
    for name, value in {**env, "HOME": HOME_IN_SANDBOX, "TERM": "xterm-256color"}.items():
        extra += ["--setenv", name, value]
    separator = argv.index("--")
    return argv[:separator] + extra + argv[separator:]


def install_binds(root: str | None) -> list[str]:
    """The CLI's install directory, read-only at a fixed place (none under /usr)."""
    if root is None:
        return []
    return ["--perms", "0755", "--dir", "/opt", "--perms", "0755", "--dir", "/opt/cli",
            "--ro-bind", root, CLI_IN_SANDBOX]  # fmt: skip


def cli_sandbox_argv(spec: SessionSpec) -> list[str]:
    """A server that is not root: the CLI's sandbox started by tmux itself (so the
    workspace is bound by path: no descriptor to pass), as the server's own uid."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise RuntimeError("bubblewrap (bwrap) is not installed: CLI agents need the sandbox")
    program, root = cli_program(spec)
    argv = sandbox_argv(bwrap, 0, program, egress=spec.egress_socket)
    at = argv.index("--bind-fd")
    argv[at : at + 3] = ["--bind", spec.workspace, "/workspace"]
    binds = ["--perms", "0755", "--dir", "/home", "--bind", spec.home, HOME_IN_SANDBOX,
             *install_binds(root), *spec.extra_bwrap]  # fmt: skip
    return cli_sandbox(argv, binds, cli_env(spec))


def _config_files(spec: SessionSpec) -> dict[str, str]:
    return spec.provider.config_files(spec.env.get("ANTHROPIC_BASE_URL", ""))


class CliSession:
    """The tmux session of one conversation's CLI, and the reader of its output."""

    def __init__(self, tmux: Tmux, spec: SessionSpec):
        self.tmux = tmux
        self.spec = spec
        self.name = session_name(spec.prefix, spec.conversation_id)
        self.window = f"{spec.provider.binary}-{uuid.uuid4().hex[:4]}"
        self.target = f"{self.name}:{self.window}"
        self.log_path = os.path.join(spec.state_dir, "pane.log")
        self.screen_dir = os.path.join(spec.state_dir, "screen")
        self._offset = 0
        self._partial = b""
        self.last_used = time.monotonic()

    async def start(self) -> None:
        await asyncio.to_thread(self._prepare_files)
        await self.tmux.kill_session(self.name)  # a leftover of an earlier process
        # What the pane shows, for the pages' live view (agent/core/terminal/stream.py).
        screen = await asyncio.to_thread(stream.new_instance, self.screen_dir)
        to_screen = stream.pipe_command(sys.executable, self.spec.app_dir, screen)
        if self.spec.sandbox is not None:
            ticket = await asyncio.to_thread(self._ticket)
            await self.tmux.new_session(self.name, self.window, self.spec.app_dir,
                                        [*self.spec.attach, ticket, self.log_path,
                                         self.spec.provider.name])  # fmt: skip
            await self.tmux.run("pipe-pane", "-O", "-t", self.target, to_screen)
        else:
            # The pane's output is the log (tmux allows one pipe per pane): both from it.
            await self.tmux.new_session(self.name, self.window, self.spec.workspace,
                                        cli_sandbox_argv(self.spec))  # fmt: skip
            tee = f"tee -a {shlex.quote(self.log_path)} | {{ {to_screen}; }}"
            await self.tmux.run("pipe-pane", "-O", "-t", self.target, tee)
        deadline = time.monotonic() + START_TIMEOUT
        while READY not in await self.tmux.capture(self.target, lines=50):
            if time.monotonic() > deadline or await self.tmux.pane_dead(self.target):
                screen = await self.tmux.capture(self.target, lines=20)
                await self.close()
                raise RuntimeError(
                    f"{self.spec.provider.name} did not start: {screen.strip()[-500:]}"
                )
            await asyncio.sleep(0.05)
        await self.tmux.send_keys(self.target, *GO)

    def _ticket(self) -> str:
        program, root = cli_program(self.spec)
        return self.spec.sandbox.cli_ticket(self.spec.conversation_id, program,
                                            cli_env(self.spec), root,
                                            self.spec.gateway_socket,
                                            self.spec.egress_socket,
                                            self.spec.preview_dir)  # fmt: skip

    def _prepare_files(self) -> None:
        os.makedirs(self.spec.state_dir, mode=0o700, exist_ok=True)
        # The log starts empty: only this session's output is read.
        with open(self.log_path, "wb"):
            pass
        if self.spec.sandbox is not None:
            # Written by the user's own file host, as the user: a link planted in the home
            # reaches nothing the user could not write anyway.
            home = self.spec.conversation_id.replace("-", "")
            self.spec.sandbox.cli_home(home, _config_files(self.spec))
            return
        os.makedirs(self.spec.home, mode=0o700, exist_ok=True)
        # The sandbox writes in its home: through the descriptor walk, a link it planted is
        # replaced or refused, never followed out (to the server's database, say).
        home = Workspace(self.spec.home)
        try:
            for relative, text in _config_files(self.spec).items():
                home.write(relative, text.encode())
        finally:
            home.close()

    async def alive(self) -> bool:
        return await self.tmux.has_session(self.name) and not await self.tmux.pane_dead(self.target)

    async def send(self, text: str) -> None:
        self.last_used = time.monotonic()
        await self.tmux.send_text(self.target, text)

    async def interrupt(self) -> None:
        line = self.spec.provider.interrupt_input()
        if line is not None:
            await self.tmux.send_text(self.target, line)
        else:
            await self.tmux.send_keys(self.target, *self.spec.provider.interrupt_keys)

    async def capture(self, escapes: bool = True) -> str:
        return await self.tmux.capture(self.target, escapes=escapes)

    async def close(self) -> None:
        await self.tmux.kill_session(self.name)

    def _read_new(self) -> list[str]:
        lines = self._read_chunk()
        if CAPPED in lines:
            raise CliExited(f"{self.spec.provider.name}'s output passed its cap; the rest "
                            "was dropped")  # fmt: skip
        return lines

    def _read_chunk(self) -> list[str]:
        with open(self.log_path, "rb") as f:
            f.seek(self._offset)
            chunk = f.read(READ_CHUNK)
        self._offset += len(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        if len(self._partial) > MAX_LINE:
            self._partial = b""
        return [line.rstrip(b"\r").decode(errors="replace") for line in lines]

    async def lines(self) -> AsyncIterator[str]:
        """The pane's output, line by line, as it comes; ``CliExited`` when the CLI is gone."""
        quiet = 0
        while True:
            lines = await asyncio.to_thread(self._read_new)
            for line in lines:
                yield line
            if lines:
                quiet = 0
                continue
            quiet += 1
            if quiet % 10 == 0 and not await self.alive():
                for line in await asyncio.to_thread(self._read_new):
                    yield line
                raise CliExited(f"{self.spec.provider.name} exited")
            await asyncio.sleep(POLL_INTERVAL)
