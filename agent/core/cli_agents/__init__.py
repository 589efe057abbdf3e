"""External CLI coding agents, Django-free.

``providers``: per CLI, how to find it, its version, its command line and environment, how
to send input and interrupt it, and the parser of its structured output into the core's
events. ``detect``: whether it can be used here. ``tmux``: the tmux client (asyncio
subprocesses only). ``session``: one CLI kept alive in a tmux session per conversation,
its output read from the pane's pipe.
"""

from agent.core.cli_agents.detect import AgentInfo, available_agents
from agent.core.cli_agents.providers import PROVIDERS, Provider, UnknownVersion, provider_for

__all__ = ["PROVIDERS", "AgentInfo", "Provider", "UnknownVersion", "available_agents",
           "provider_for"]  # fmt: skip
