"""A conversation's background jobs (agent/core/tools/background.py): run by the forwarder
in its terminal's sandbox (agent/sandbox/preview_forwarder.py), started when it has none.

There, what a job serves is what the Preview panel and ``/preview/<conversation>/<port>/``
reach, and what the user's shell sees (``ps``); the sandbox is the terminal's (the owner's
uid and cgroup, the workspace or worktree, the network policy), so a job adds no power
bash did not have. A job ends with the terminal: its shell's ``exit``, the conversation's
deletion, or the owner's least recently used terminal making room for another.

The forwarder's answers are hostile input: any process in the sandbox can answer in its
place. A job's state keeps only its known fields, of their types and sizes, as valid
Unicode (a lone surrogate would not store), so nothing it sends becomes a card's display
or another key of the tool's result.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from agent.core.tools.background import BackgroundUnavailable
from agent.runs import previews
from agent.runs.previews import PreviewUnavailable

MAX_LISTED = 64  # job states read from one JOBS answer
COMMAND_SHOWN = 200  # characters of a job's command in its state
OUTPUT_SHOWN = 32768  # characters of a job's output tail
READY_WITHIN = 20.0  # seconds a starting sandbox has to answer
SETTLE = 5.0  # seconds a started job is watched for its output and ports
POLL = 0.2


class ConversationJobs:
    def __init__(self, conversation_id, owner_id: int):
        self.key, self.owner_id = str(conversation_id), int(owner_id)

    async def start(self, command: str) -> dict[str, Any]:
        await self._ready()
        before = set(await previews.ports(self.key))
        payload = json.dumps({"command": command}).encode()
        job = (await self._ask(f"START {len(payload)}", payload))["job"]
        if job is None:
            raise BackgroundUnavailable("the terminal's sandbox named no job")
        deadline = time.monotonic() + SETTLE
        while True:
            await asyncio.sleep(POLL)
            state = await self._ask(f"OUTPUT {job}")
            listening = sorted(set(await previews.ports(self.key)) - before)
            if not state.get("running") or listening or time.monotonic() > deadline:
                break
        state["ports"] = [{"port": port, "preview": f"/preview/{self.key}/{port}/"}
                          for port in listening]  # fmt: skip
        return state

    async def jobs(self) -> list[dict[str, Any]]:
        try:
            found = await previews.request(self.key, "JOBS")
        except PreviewUnavailable:
            return []  # no terminal, no jobs
        if not isinstance(found, list):
            return []
        return [job_state(job) for job in found[:MAX_LISTED] if isinstance(job, dict)]

    async def output(self, job: int) -> dict[str, Any]:
        return await self._ask(f"OUTPUT {int(job)}")

    async def stop(self, job: int) -> dict[str, Any]:
        return await self._ask(f"STOP {int(job)}")

    async def _ready(self) -> None:
        """The terminal's sandbox running and its forwarder answering."""
        from agent.runs.terminals import TerminalRefused, terminals

        try:
            await terminals.ensure(self.key, self.owner_id)
        except TerminalRefused as exc:
            raise BackgroundUnavailable(f"it runs in the conversation's terminal: {exc}") from None
        deadline = time.monotonic() + READY_WITHIN
        while True:
            try:
                await previews.request(self.key, "JOBS")
                return
            except PreviewUnavailable:
                if time.monotonic() > deadline:
                    raise BackgroundUnavailable(
                        "the conversation's terminal sandbox did not start"
                    ) from None
                await asyncio.sleep(POLL)

    async def _ask(self, line: str, payload: bytes = b"") -> dict[str, Any]:
        try:
            answer = await previews.request(self.key, line, payload)
        except PreviewUnavailable as exc:
            raise BackgroundUnavailable(f"{exc} Its background jobs ended with it.") from None
        if not isinstance(answer, dict):
            raise BackgroundUnavailable("the terminal's sandbox gave no answer")
        if "error" in answer:
            raise BackgroundUnavailable(_text(answer["error"], COMMAND_SHOWN))
        return job_state(answer, output=line.startswith("OUTPUT"))


def job_state(answer: dict, output: bool = False) -> dict[str, Any]:
    """A job's state as the forwarder should have said it: its known fields only (with
    its output's tail when ``output``)."""
    found: dict[str, Any] = {"job": _number(answer.get("job")), "pid": _number(answer.get("pid")),
                             "command": _text(answer.get("command"), COMMAND_SHOWN),
                             "running": answer.get("running") is True,
                             "exit_code": _number(answer.get("exit_code"))}  # fmt: skip
    if output:
        found["output"] = _text(answer.get("output"), -OUTPUT_SHOWN)
        found["dropped"] = _number(answer.get("dropped")) or 0
    return found


def _number(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**63:
        return value
    return None


def _text(value: Any, limit: int) -> str:
    """At most ``limit`` characters of a string (its first; with a negative ``limit``, its
    last), a lone surrogate replaced."""
    if not isinstance(value, str):
        return ""
    kept = value[:limit] if limit > 0 else value[limit:]
    return kept.encode("utf-8", "replace").decode("utf-8")
