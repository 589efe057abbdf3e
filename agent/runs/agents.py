"""The ``Agent`` that answers a conversation's prompts: the built-in loop on the process's
provider, or the conversation's external CLI. Chosen here, once; the run holds an ``Agent``
and never asks which."""

from __future__ import annotations

from agent.core.agent import Agent
from agent.core.instructions import DirectoryInstructions
from agent.core.loop import AgentLoop, Guard
from agent.core.loop.hooks import Sink
from agent.core.tools import Workspace, build_tools
from agent.runs import attachments, checkpoints
from agent.runs.checkpoints import Checkpointer
from agent.runs.claim import Setup
from agent.runs.cli_run import CliAgent
from agent.runs.clients import provider_for
from agent.runs.sandbox import sandbox_limits


def agent_for(setup: Setup, workspace: Workspace, system: str, emit: Sink,
              guard: Guard | None, checkpointer: Checkpointer | None = None) -> Agent:  # fmt: skip
    """``checkpointer``: a project conversation's (its changing tools are followed by a
    checkpoint; agent/runs/checkpoints.py)."""
    conversation, config = setup.conversation, setup.config
    next_seq = conversation.last_seq + 1
    if conversation.agent != "harness":
        return CliAgent(conversation, emit, next_seq, config.approval, config.model, guard=guard)
    tools = build_tools(workspace, setup.bash_mode, sandbox_limits=sandbox_limits())
    if checkpointer is not None:
        tools = checkpoints.wrap(tools, checkpointer)
    return AgentLoop(
        provider_for(config),
        tools,
        config,
        emit,
        system=system,
        messages=conversation.history,
        next_seq=next_seq,
        instructions=DirectoryInstructions(workspace, conversation.history),
        images=attachments.loader(conversation.id),
        guard=guard,
    )
