"""Whether each CLI agent can be used here, and its version: ``--version`` run off the
loop in a throw-away home, remembered a minute."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
import time
from dataclasses import dataclass, field

from agent.core.cli_agents.providers import PROVIDERS, Provider, UnknownVersion

VERSION_TIMEOUT = 20.0  # seconds: a node CLI's first start can be slow on a busy machine


@dataclass(frozen=True)
class AgentInfo:
    name: str
    available: bool
    version: str | None
    reason: str | None = None  # why it is unavailable
    # Unavailable for now only (``--version`` did not answer in time on a busy host): not
    # remembered, so the next request asks again, and a version seen before still holds.
    transient: bool = field(default=False, compare=False, repr=False)


async def detect(provider: Provider, environ: dict[str, str] | None = None) -> AgentInfo:
    """Whether the CLI can be used here, and its version (runs ``--version``, off the loop)."""
    executable = provider.find(environ)
    if executable is None:
        reason = f"not installed (not on PATH, {provider.command_env_name()} unset)"
        return AgentInfo(provider.name, False, None, reason)
    # A HOME of its own, thrown away after: some CLIs write their state there even for
    # --version (and fail when they cannot), and none may write in the server's.
    try:
        with tempfile.TemporaryDirectory(prefix="harness-version-") as home:
            process = await asyncio.create_subprocess_exec(
                executable, "--version", stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
                     "PI_OFFLINE": "1"},
                start_new_session=True,  # its own group: a timeout kills what it started too
            )  # fmt: skip
            try:
                out, _ = await asyncio.wait_for(process.communicate(), VERSION_TIMEOUT)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
                reason = f"--version did not answer within {VERSION_TIMEOUT:.0f} s"
                return AgentInfo(provider.name, False, None, reason, transient=True)
    except OSError as exc:
        return AgentInfo(provider.name, False, None, f"could not run --version: {exc}")
    try:
        version = provider.parse_version(out.decode(errors="replace"))
    except UnknownVersion as exc:
        return AgentInfo(provider.name, False, None, str(exc))
    return AgentInfo(provider.name, True, version)


_cache: dict[tuple, tuple[float, AgentInfo]] = {}
CACHE_SECONDS = 60.0


async def detect_cached(provider: Provider, environ: dict[str, str] | None = None) -> AgentInfo:
    """``detect``, remembered a minute (``--version`` starts node: not once per request)."""
    key = (provider.name, tuple(sorted((environ or {}).items())))
    cached = _cache.get(key)
    if cached is None or time.monotonic() - cached[0] > CACHE_SECONDS:
        info = await detect(provider, environ)
        if info.transient:
            return cached[1] if cached is not None else info
        cached = _cache[key] = (time.monotonic(), info)
    return cached[1]


async def available_agents(environ: dict[str, str] | None = None) -> list[AgentInfo]:
    """Every provider with its availability."""
    return [await detect_cached(provider, environ) for provider in PROVIDERS.values()]
