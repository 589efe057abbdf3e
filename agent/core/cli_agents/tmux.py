"""The tmux client: every call an asyncio subprocess, never a blocking one.

One tmux server per deployment, on its own socket (``-S``), so the harness's sessions are
apart from anyone else's on the machine. Input goes through ``load-buffer`` (from stdin) and
``paste-buffer``: any text, any length, multi-line, never interpreted as keys.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid

TIMEOUT = 10.0
# tmux's server (and every pane's first process) takes the environment of the client that
# starts it: never the server's own (its API key, its secret key).
CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "xterm-256color"}


class TmuxError(Exception):
    pass


def tmux_path() -> str | None:
    return shutil.which("tmux")


async def tmux_version() -> str | None:
    path = tmux_path()
    if path is None:
        return None
    process = await asyncio.create_subprocess_exec(
        path, "-V", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    out, _ = await asyncio.wait_for(process.communicate(), TIMEOUT)
    return out.decode(errors="replace").strip() or None


class Tmux:
    def __init__(self, socket: str):
        self.socket = socket

    async def run(self, *args: str, stdin: bytes | None = None, check: bool = True) -> str:
        path = tmux_path()
        if path is None:
            raise TmuxError("tmux is not installed")
        process = await asyncio.create_subprocess_exec(
            path, "-S", self.socket, *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=CLEAN_ENV,
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(process.communicate(stdin), TIMEOUT)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise TmuxError(f"tmux {args[0]} timed out") from None
        if check and process.returncode != 0:
            raise TmuxError(f"tmux {args[0]} failed: {err.decode(errors='replace').strip()}")
        return out.decode(errors="replace")

    async def has_session(self, name: str) -> bool:
        return await self._ok("has-session", "-t", f"={name}")

    async def _ok(self, *args: str) -> bool:
        try:
            await self.run(*args)
        except TmuxError:
            return False
        return True

    async def new_session(self, name: str, window: str, cwd: str, argv: list[str],
                          width: int = 160, height: int = 48) -> None:  # fmt: skip
        # One chain: the options hold before the pane's process can exit (a dead pane is
        # kept, so its exit is seen: tmux's #{pane_dead}).
        await self.run("start-server", ";", "set-option", "-g", "remain-on-exit", "on", ";",
                       "set-option", "-g", "history-limit", "5000", ";",
                       "new-session", "-d", "-s", name, "-n", window, "-c", cwd,
                       "-x", str(width), "-y", str(height), "--", *argv)  # fmt: skip

    async def send_text(self, target: str, text: str) -> None:
        """Paste ``text`` into the pane as it is (``-r``: newlines not turned into CRs)."""
        buffer = f"harness-{uuid.uuid4().hex[:12]}"
        await self.run("load-buffer", "-b", buffer, "-", stdin=text.encode())
        await self.run("paste-buffer", "-d", "-r", "-b", buffer, "-t", target)

    async def send_keys(self, target: str, *keys: str) -> None:
        await self.run("send-keys", "-t", target, *keys)

    async def capture(self, target: str, lines: int = 200, escapes: bool = False) -> str:
        args = ["capture-pane", "-p", "-J", "-S", f"-{lines}", "-t", target]
        if escapes:
            args.insert(2, "-e")
        return await self.run(*args)

    async def pane_dead(self, target: str) -> bool:
        try:
            out = await self.run("display-message", "-p", "-t", target, "#{pane_dead}")
        except TmuxError:
            return True
        return out.strip() == "1"

    async def kill_session(self, name: str) -> None:
        await self.run("kill-session", "-t", f"={name}", check=False)

    async def list_sessions(self, prefix: str) -> list[str]:
        out = await self.run("list-sessions", "-F", "#{session_name}", check=False)
        return [line for line in out.splitlines() if line.startswith(prefix + "-")]
