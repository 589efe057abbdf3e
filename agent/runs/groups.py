"""Channel-layer group names of the run layer: a conversation's viewers, and the control
group through which any process reaches the process that runs its prompt."""

from __future__ import annotations


def group_name(conversation_id) -> str:
    """Every socket and event stream open on the conversation."""
    return f"conv.{getattr(conversation_id, 'hex', conversation_id)}"


def control_group(conversation_id) -> str:
    """The process running the conversation's prompt (for cancel)."""
    return f"runs.{getattr(conversation_id, 'hex', str(conversation_id).replace('-', ''))}"
