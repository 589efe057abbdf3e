"""Channel-layer group names of the run layer: a conversation's viewers, and the control
group through which any process reaches the process that runs its prompt."""

from __future__ import annotations

import logging

from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


def _spelled(conversation_id) -> str:
    """The id in a group's name: a UUID, or a string of one as the run layer holds it,
    spelled one way."""
    return getattr(conversation_id, "hex", None) or str(conversation_id).replace("-", "")


def group_name(conversation_id) -> str:
    """Every socket and event stream open on the conversation."""
    return f"conv.{_spelled(conversation_id)}"


def control_group(conversation_id) -> str:
    """The process running the conversation's prompt (for cancel)."""
    return f"runs.{_spelled(conversation_id)}"


async def announce_terminal(conversation_id) -> None:
    """A terminal of the conversation (its shell, its CLI agent's pane) started: the pages
    on it, in every process, start following it now (agent/web/terminal_tail.py) rather
    than when they next look. Only a notice: a page that misses it looks again soon."""
    try:
        await get_channel_layer().group_send(group_name(conversation_id),
                                             {"type": "terminal.started"})  # fmt: skip
    except Exception:  # (the layer unreachable): the pages look again later
        log.warning("could not announce a terminal of %s", conversation_id, exc_info=True)
