"""``Agent``: what the run layer needs of whatever answers a conversation's prompts.

Two implement it: the built-in loop (``agent.core.loop.AgentLoop``) and an external CLI
(``agent.runs.cli_run.CliAgent``). The run layer holds one and never asks which. Every
prompt, compaction or answer given again ends with one ``idle`` or ``error`` status event;
what an agent cannot do it says through the same interface: ``compact`` and
``answer_again`` as an ``error`` event of code ``not_supported``, ``queue`` by raising
``Refused`` (which the API turns into a clear error).
"""

from __future__ import annotations

from typing import Any, Protocol

from agent.core.images import ImageRef


class Refused(Exception):  # noqa: N818 - a refusal, raised like one
    """A request the agent turns down, with a code the API reports and a message for
    the user."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class Agent(Protocol):
    next_seq: int  # the seq of the next event (the conversation's, continued)

    @property
    def running(self) -> bool: ...

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The model history to keep for the next prompt (a copy)."""
        ...

    async def prompt(self, content: str, author: str | None = None, *,
                     images: tuple[ImageRef, ...] = ()) -> Any: ...  # fmt: skip

    async def compact(self) -> Any: ...

    async def answer_again(self) -> Any:
        """Answer the prompt the history ends with once more (a new branch's)."""
        ...

    def cancel(self) -> bool:
        """Stop the running prompt (False when none runs)."""
        ...

    def queue(
        self,
        content: str,
        mode: str,
        queue_id: str | None = None,
        author: str | None = None,
        *,
        images: tuple[ImageRef, ...] = (),
    ) -> str:
        """Queue a prompt on the running one (``steer`` or ``follow_up``); its id. Raises
        ``NotRunning`` when none runs, ``QueueFull``, or ``Refused``."""
        ...

    def unqueue(self, queue_id: str) -> bool: ...

    def drop_from(self, author: str) -> int:
        """Take out what ``author`` queued (they lost access); how many went."""
        ...

    def decide(
        self,
        call_id: str,
        decision: str,
        reason: str | None = None,
        by: str = "",
        *,
        approve_all: bool = False,
    ) -> str:
        """A tool call's approval: ``decided``, ``unknown`` or ``already``."""
        ...
