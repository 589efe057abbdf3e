"""The approval gate: in ``ask``, a call to a tool that changes things (``write``, ``edit``,
``bash``) waits for the user's decision. It emits ``approval`` (with what the call would do,
read only: an edit's diff) and a ``waiting_input`` status, then awaits a future that
``decide`` resolves (a waiting run holds no thread and no database connection), or asks the
``approver`` when one is given (the command line's terminal). Cancelling the run ends the
wait."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from agent.core.config import GATED_TOOLS
from agent.core.events import ApprovalDecisionEvent, ApprovalEvent, Event, StatusEvent
from agent.core.loop.types import DECISIONS, Approver, Decision
from agent.core.tools.base import Tool

log = logging.getLogger(__name__)


class ApprovalGate:
    def __init__(
        self, mode: str, emit: Callable[[Event], object], approver: Approver | None = None
    ):
        self.mode = mode  # the config's approval: auto | ask | read_only
        self.emit = emit
        self.approver = approver
        self.pending: dict[str, asyncio.Future[Decision]] = {}
        self.decided: set[str] = set()  # in this run
        self.approve_all = False  # "approve all for this run"

    def begin_run(self) -> None:
        self.decided.clear()
        self.approve_all = False

    def end_run(self) -> None:
        self.pending.clear()

    def decide(
        self,
        call_id: str,
        decision: str,
        reason: str | None = None,
        by: str = "",
        *,
        approve_all: bool = False,
    ) -> str:
        """``decided``; ``unknown`` when no such call waits; ``already`` when it was decided
        before. ``approve_all`` also approves every later call of this run."""
        if decision not in DECISIONS:
            raise ValueError(f"unknown decision {decision!r}")
        future = self.pending.get(call_id)
        if future is None:
            return "already" if call_id in self.decided else "unknown"
        if future.done():
            return "already"
        if approve_all and decision == "approve":
            self.approve_all = True
        future.set_result(Decision(decision, reason if decision == "deny" else None, by))
        return "decided"

    async def check(self, use: dict[str, Any], tools: dict[str, Tool]) -> Decision | None:
        """The decision on a call, waited for; None when it needs none."""
        if (
            self.mode != "ask"
            or use["name"] not in GATED_TOOLS
            or use["name"] not in tools
            or self.approve_all
        ):
            return None
        call_id = use["id"]
        display = await _preview(tools[use["name"]], use)
        self.emit(ApprovalEvent(id=call_id, name=use["name"], input=use["input"],
                                display=display))  # fmt: skip
        message = f"Waiting for approval: {use['name']}"
        self.emit(StatusEvent(state="waiting_input", message=message))
        if self.approver is not None:
            call = {"id": call_id, "name": use["name"], "input": use["input"]}
            decision = await self.approver(call)
        else:
            future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
            self.pending[call_id] = future
            try:
                decision = await future
            finally:
                self.pending.pop(call_id, None)
        self.decided.add(call_id)
        self.emit(ApprovalDecisionEvent(id=call_id, decision=decision.decision,
                                        reason=decision.reason, by=decision.by))  # fmt: skip
        return decision


async def _preview(tool: Tool, use: dict[str, Any]) -> dict[str, Any] | None:
    """What a tool would do, read only (an edit's diff), for the approval card."""
    preview = getattr(tool, "preview", None)
    if preview is None:
        return None
    try:
        return await preview(use["input"])
    except asyncio.CancelledError:
        raise
    except Exception:  # a preview that cannot be made must not fail the call
        log.exception("could not preview %s", use["name"])
        return None
