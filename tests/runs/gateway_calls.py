"""What the model gateway's tests share: the deployment's key and the calls' helpers."""

from __future__ import annotations

import os

from agent.core.events import UsageEvent

DEPLOYMENT_KEY = "sk-the-deployments-own-key"


def socket_of(gateway) -> str:
    return os.path.join(gateway._directory, "s")


def metered_into(gateway) -> list[UsageEvent]:
    usage: list[UsageEvent] = []
    gateway.begin_run("run-1", on_usage=usage.append, guard=None)  # (free: no budget)
    return usage
