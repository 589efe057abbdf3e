"""A conversation's background jobs (agent/core/tools/background.py): run by the forwarder
in its terminal's sandbox (agent/sandbox/preview_forwarder.py), started when it has none.

There, what a job serves is what the Preview panel and ``/preview/<conversation>/<port>/``
reach, and what the user's shell sees (``ps``); the sandbox is the terminal's (the owner's
uid and cgroup, the workspace or worktree, the network policy), so a job adds no power
bash did not have. A job ends with the terminal: its shell's ``exit``, the conversation's
deletion, or the owner's least recently used terminal making room for another.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from agent.core.tools.background import BackgroundUnavailable
from agent.runs import previews
from agent.runs.previews import PreviewUnavailable

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
        return found if isinstance(found, list) else []

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
            raise BackgroundUnavailable(str(answer["error"]))
        return answer
