"""A page's terminal, in: ``terminal_input`` (keys, as the page's emulator sends them) and
``terminal_resize`` (its columns and rows), for the conversation's shell
(agent/runs/terminals.py). The socket checked the role already (only the owner and
collaborators drive: a viewer's keys never get here); here each frame's shape and size,
and a per-socket rate: a key is a tmux call, so a flood of frames is refused, not queued.
"""

from __future__ import annotations

import json

from agent.core.cli_agents.tmux import TmuxError
from agent.runs.terminals import MAX_INPUT, TerminalRefused, terminals
from agent.server.token_bucket import TokenBucket

ACTIONS = frozenset({"terminal_input", "terminal_resize"})
RATE = 100.0  # frames per second a socket may send, on average
BURST = 200.0


def new_bucket() -> TokenBucket:
    """A socket's own pace for its frames."""
    return TokenBucket(RATE, BURST)


async def handle(frame: dict, conversation_id, owner_id: int, bucket: TokenBucket) -> str | None:
    """Does what the frame asks; None, or why not (for an error frame)."""
    if not bucket.take():
        return "Too many terminal frames: slow down."
    try:
        if frame["action"] == "terminal_input":
            data = frame.get("data")
            if not isinstance(data, str) or not data or len(data) > MAX_INPUT:
                return f"terminal_input needs 'data', a string of 1 to {MAX_INPUT} characters."
            await terminals.send(conversation_id, owner_id, data)
        else:
            await terminals.resize(conversation_id, owner_id, frame.get("cols"), frame.get("rows"))
    except (TerminalRefused, TmuxError) as refused:
        return str(refused)
    return None


def refusal(message: str) -> str:
    """The shell's answer to a frame it did not take: shown in the page's terminal."""
    return json.dumps({"type": "terminal", "pane": "shell", "data": "", "error": message})
