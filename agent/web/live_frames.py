"""A conversation's broadcast batches rendered into the page's fragments: once per batch in
each process that has sockets on it (agent/web/viewers.py), not once per socket, and not in
the run's process when no page there watches.

A run broadcasts its events (wire JSON) with the first seq of the run, the conversation's
shown figures (the meter, the title) and whether the title changed (agent/runs/broadcast.py).
Rendering keeps state from frame to frame (``FragmentRenderer``: the live markdown block,
the status line, the queue), one renderer per run, as the run's own writer used to keep:
a batch that starts a run starts a new one. A process that joins a run mid-stream, or
misses a message, rebuilds that state from the event log (the run's stored events, up to
the batch): until the log has caught up with the stream (text deltas are stored at most
once a second) it tries again on each batch. The pages apply a frame only where it
continues what they hold (the sync marker), and catch up from the same log otherwise.
"""

from __future__ import annotations

import contextlib
from decimal import Decimal
from functools import partial

from asgiref.sync import sync_to_async

from agent.core.events import Event, TextEvent, ToolResultEvent, UserEvent, from_dict
from agent.models import Conversation
from agent.models import Event as StoredEvent
from agent.runs.eventlog import SHOWN, from_stored
from agent.runs.snapshot import prompt_before
from agent.ui.fragments import FragmentRenderer, sync_marker, title_fragments
from agent.ui.render_pool import prehighlight, prerender
from agent.ui.transcript import pending_highlights


@partial(sync_to_async, thread_sensitive=False)
def _stored(conversation_id, first: int, before: int) -> list[Event]:
    """The run's stored events from seq ``first`` up to (not including) ``before``."""
    rows = StoredEvent.objects.filter(conversation_id=conversation_id, seq__gte=first,
                                      seq__lt=before).order_by("seq")  # fmt: skip
    return from_stored(rows.values_list("payload", flat=True))


@partial(sync_to_async, thread_sensitive=False)
def _prompt_before(conversation_id, before: int) -> list[Event]:
    conversation = Conversation.objects.filter(id=conversation_id).first()
    return prompt_before(conversation, before) if conversation is not None else []


class Shown:
    """The figures of a conversation the fragments show (what the templates read of one),
    without a model instance per frame."""

    def __init__(self, conversation_id, shown: dict | None) -> None:
        self.id = conversation_id
        for name in SHOWN:
            setattr(self, name, (shown or {}).get(name) or _DEFAULTS.get(name, 0))
        self.cost_usd = Decimal(self.cost_usd)

    @property
    def display_title(self) -> str:
        return self.title or Conversation(title="").display_title


_DEFAULTS = {"title": "", "cost_usd": "0", "project_id": ""}
# Events whose fragments may be made in the render worker first (``render`` awaits it)
_MAY_WAIT = frozenset({TextEvent.type, ToolResultEvent.type})


def shown_conversation(conversation_id, shown: dict | None) -> Shown:
    return Shown(conversation_id, shown)


class LiveFrames:
    """One conversation's renderer in this process."""

    def __init__(self, conversation_id) -> None:
        self.conversation_id = conversation_id
        self.renderer = FragmentRenderer()
        self.run: int | None = None  # the first seq of the run being rendered
        self.next_seq: int | None = None  # the seq the next batch must start at

    async def _rebuild(self, run: int, seq_from: int) -> None:
        """The run's state as its frames up to ``seq_from`` left it, from the event log."""
        events = await _stored(self.conversation_id, run, seq_from)
        self.renderer = FragmentRenderer()
        await self._answering(run, events)
        if events:
            self.renderer.render(events, shown_conversation(self.conversation_id, None))
        # All there: frames continue from here. Else (text not stored yet) tried again.
        whole = not events or events[-1].seq == seq_from - 1 or run == seq_from
        self.next_seq = seq_from if whole else None

    async def _answering(self, run: int, events: list[Event]) -> None:
        """A run that starts without a prompt (a regenerate, a compaction) answers the one
        before it: its answers' Regenerate names that prompt, as a reload's would."""
        if events and isinstance(events[0], UserEvent):
            return
        for prompt in await _prompt_before(self.conversation_id, run):
            self.renderer.transcript.answering(prompt)

    def render_now(self, message: dict) -> str | None:
        """The batch's fragments, when they need nothing awaited: the next batch of the run
        being rendered, with no finished text or tool result (which may go to the render
        worker). That is most batches of a stream (its deltas); None for the others, which
        ``render`` takes."""
        first = message["seq_from"]
        if (message.get("interrupted") or message.get("run", first) != self.run
                or first != self.next_seq
                or any(event["type"] in _MAY_WAIT for event in message["events"])):  # fmt: skip
            return None
        events = [from_dict(event) for event in message["events"]]
        with self._rebuilt_after_failure():
            html = self.renderer.render(events, self._shown(message))
        self.next_seq = message["seq_to"] + 1
        return self._framed(message, html)

    @contextlib.contextmanager
    def _rebuilt_after_failure(self):
        """A batch whose rendering failed is lost to the pages (they catch up from the log)
        and to the renderer: the next batch starts again from the event log."""
        try:
            yield
        except BaseException:
            self.next_seq = None
            raise

    async def render(self, message: dict) -> str:
        """The batch's fragments, its sync marker first."""
        first, last = message["seq_from"], message["seq_to"]
        events = [from_dict(event) for event in message["events"]]
        conversation = self._shown(message)
        if message.get("interrupted"):
            return self._framed(message, self._interrupted(message, events, conversation))
        with self._rebuilt_after_failure():
            run = message.get("run", first)
            if run == first:  # the run's first batch
                self.renderer, self.next_seq = FragmentRenderer(), first
                await self._answering(run, events)
            elif run != self.run or first != self.next_seq:
                await self._rebuild(run, first)
            self.run = run
            whole = self.next_seq is not None
            await prerender([e.content for e in events if isinstance(e, TextEvent)])
            await prehighlight(pending_highlights(self.renderer.transcript, events))
            html = self.renderer.render(events, conversation)
            self.next_seq = last + 1 if whole else None
        return self._framed(message, html)

    def _shown(self, message: dict) -> Shown:
        return shown_conversation(self.conversation_id, message.get("shown"))

    def _framed(self, message: dict, html: str) -> str:
        if message.get("title"):
            html = title_fragments(self._shown(message)) + html
        return sync_marker(message["seq_from"], message["seq_to"]) + html

    def _interrupted(self, message: dict, events: list[Event], conversation) -> str:
        """A dead process's run, ended by another: pages may hold its live block (it is
        replaced), and prompts dropped from its queue are shown as not sent."""
        renderer = FragmentRenderer(live=True)
        for event in message.get("dropped", ()):
            renderer.transcript.fold_queue(from_dict(event))
        self.renderer, self.run, self.next_seq = FragmentRenderer(), None, None
        return renderer.render(events, conversation)
