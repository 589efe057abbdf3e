"""The one place a prompt is accepted, for the page's socket and the API alike.

Its text first (present, within ``HARNESS_MAX_PROMPT_CHARS``), then the run layer's claim:
the conversation reachable and idle, the owner active and within their quotas, the storage
able to take it. A refusal is a ``RunRefused`` whose code each adapter shows in its medium.
"""

from __future__ import annotations

from django.conf import settings

from agent.runs.claim import RunRefused
from agent.runs.manager import runs


def checked_text(content) -> str:
    """The prompt's text, or ``RunRefused`` (``empty_prompt``, ``prompt_too_large``)."""
    if not isinstance(content, str) or not content.strip():
        raise RunRefused("empty_prompt", "Type a prompt first.")
    limit = settings.HARNESS_MAX_PROMPT_CHARS
    if len(content) > limit:
        raise RunRefused(
            "prompt_too_large",
            f"The prompt is {len(content):,} characters; the limit is {limit:,}. Nothing was sent.",
        )
    return content


async def accept_prompt(conversation_id, user, content, *, remember: bool = False) -> None:
    """Start the prompt on the conversation, or raise ``RunRefused`` saying why not;
    ``remember``: it joins the user's prompt history (the page's prompts, not the API's)."""
    await runs.start(conversation_id, user.pk, checked_text(content), remember=remember)
