"""The agent loop as an asyncio library, in the shape of pi-mono's agent loop: functions over
a context (``context.py``) with a configuration holding the hooks (``hooks.py``: the model's
``Provider``, the emit sink, the prompt queue, the approval gate, the context transforms,
the budget guard, the abort signal). A run (``run.py``) streams a turn (``turn.py``), runs
its tools one by one (``tools.py``), sends the results back and repeats until the model
stops calling tools; ``AgentLoop`` (``agent.py``) wires them as an ``Agent``."""

from agent.core.loop.agent import AgentLoop
from agent.core.loop.types import (
    DECISIONS,
    KEEP_EXCHANGES,
    MAX_QUEUED,
    STEERED,
    Approver,
    CallRefused,
    Decision,
    Guard,
    NotRunning,
    PromptAlreadyRunning,
    QueuedPrompt,
    QueueFull,
    RunResult,
    denied_message,
)

__all__ = [
    "DECISIONS",
    "KEEP_EXCHANGES",
    "MAX_QUEUED",
    "STEERED",
    "AgentLoop",
    "Approver",
    "CallRefused",
    "Decision",
    "Guard",
    "NotRunning",
    "PromptAlreadyRunning",
    "QueueFull",
    "QueuedPrompt",
    "RunResult",
    "denied_message",
]
