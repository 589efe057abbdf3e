"""What a page's socket may ask (frames in): a prompt, a queued prompt, unqueue, cancel,
sync, approve or deny, compact, edit, regenerate, show a branch, the terminal's keys
and size (agent/web/terminal_frames.py), and its screen again (agent/web/terminal_tail.py).

Access first, on every frame (agent/access.py's roles): any reader may sync and ask for
the terminal's screen; everything else needs a role that drives, and a viewer gets an
error frame with nothing run. Bad frames get an error fragment; the socket stays open.
Every prompt frame is answered on its socket: accepted, or refused and why (the alert
beside the page's composer), so the page clears its box only for a prompt that runs.
"""

from __future__ import annotations

import json
from functools import partial

from channels.db import database_sync_to_async

from agent.access import DRIVE, allows, conversation_for
from agent.models import Conversation
from agent.runs import branches
from agent.runs.claim import RunRefused
from agent.runs.manager import runs
from agent.runs.snapshot import snapshot
from agent.ui.fragments import composer_alert, render_catch_up, render_reset, ws_error
from agent.web import terminal_frames
from agent.web.feed import Ended, Replayed, Switched, replay
from agent.web.prompts import (
    accept_prompt,
    decide_approval,
    regenerate,
    remove_queued,
    start_compaction,
    switch_branch,
)
from agent.web.revocation import NOT_FOUND

# What a frame's action needs beyond reading: a viewer may only sync.
DRIVING = frozenset({"cancel", "unqueue", "compact", "approve", "deny", "edit", "regenerate",
                     "branch", *terminal_frames.ACTIONS})  # fmt: skip
FORBIDDEN = "You may watch this conversation but not prompt or steer it."


@partial(database_sync_to_async, thread_sensitive=False)
def _conversation(conversation_id, user):
    return conversation_for(user, conversation_id)


@partial(database_sync_to_async, thread_sensitive=False)
def _caught_up(replayed: Replayed, always: bool) -> str | None:
    """The fragments of what the log gave after ``replayed.after``: for a sync, always
    (its marker answers it); for a gap the feed fills, only if something was missing."""
    if not always and not any(event.seq > replayed.after for event in replayed.events):
        return None
    return render_catch_up(replayed.events, replayed.after, replayed.conversation)


def _reset(conversation_id, user) -> str | None:
    found = snapshot(conversation_id, user)
    if found is None:
        return None
    conversation, events = found
    return render_reset(events, conversation, branches.switches(conversation))


_redraw = database_sync_to_async(_reset, thread_sensitive=False)


class SocketFrames:
    """The consumer's handling of the frames a page sends (a mixin: ``self`` is the
    consumer, with ``conversation_id``, ``user``, ``role``, ``refused``)."""

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # Checked again on every frame: a user deactivated, a password changed, a session
        # ended since connecting must not keep driving the agent.
        if self.refused or not await self._recheck():
            return
        frame = self._parse(text_data, bytes_data)
        if isinstance(frame, str):
            await self.send(text_data=ws_error(frame))
            return
        action = frame.get("action")
        drives = "action" not in frame or (isinstance(action, str) and action in DRIVING)
        if drives and not allows(self.role, DRIVE):
            await self.send(text_data=ws_error(FORBIDDEN, "forbidden"))  # nothing is run
            return
        if frame.get("action") == "cancel":
            await runs.cancel(self.conversation_id)
            return
        if action == "terminal_screen":  # any reader's: the screen, again
            if self.terminal_bucket.take():
                for tail in self.tails:
                    tail.screen_again()
            return
        if isinstance(action, str) and action in terminal_frames.ACTIONS:  # as its owner
            refused = await terminal_frames.handle(frame, self.conversation_id, self.owner_id,
                                                   self.terminal_bucket)  # fmt: skip
            if refused is not None:
                await self.send(text_data=terminal_frames.refusal(refused))
            return
        if frame.get("action") == "sync":
            after = frame.get("after")
            if not isinstance(after, int) or isinstance(after, bool) or after < 0:
                await self.send(text_data=ws_error("sync needs a whole number 'after'."))
                return
            # What the page is missing after ``after``; a page that holds another branch's
            # events than the active one's gets the transcript whole (docs/API.md, branches).
            (item,) = await replay(self.conversation_id, self.user, after, follow=False)
            if isinstance(item, Ended):
                await self._refuse(item.reason)
            elif isinstance(item, Switched):
                await self.redraw()
            else:
                await self.fill(item, always=True)
            return
        if frame.get("action") == "unqueue":
            if not isinstance(frame.get("id"), str):
                await self.send(text_data=ws_error("unqueue needs the queued prompt's 'id'."))
            elif not await self._unqueue(frame["id"]):
                await self.send(text_data=composer_alert(
                    "That prompt is no longer queued: it was sent or removed.", "not_queued",
                ))  # fmt: skip
            return
        if action in ("edit", "regenerate", "branch"):
            await self._branch_action(frame)
            return
        if frame.get("action") == "compact":
            try:
                await start_compaction(self.conversation_id, self.user)
            except RunRefused as refused:
                await self.send(text_data=composer_alert(refused.message, refused.code))
            return
        if frame.get("action") in ("approve", "deny"):
            conversation = await _conversation(self.conversation_id, self.user)
            running = conversation is not None and conversation.state == Conversation.State.RUNNING
            try:
                await decide_approval(
                    self.conversation_id, self.user, frame.get("id"), frame["action"],
                    frame.get("reason"), approve_all=bool(frame.get("approve_all")),
                    running=running,
                )  # fmt: skip
            except RunRefused as refused:
                await self.send(text_data=composer_alert(refused.message, refused.code))
            return
        if "action" in frame:
            await self.send(text_data=ws_error(f"Unknown action {str(frame['action'])[:40]!r}."))
            return
        try:
            await accept_prompt(self.conversation_id, self.user, frame.get("content"),
                                frame.get("mode"), remember=True,
                                images=frame.get("images"))  # fmt: skip
        except RunRefused as refused:
            if refused.code == "empty_prompt":  # the page sends none: a malformed frame
                await self.send(text_data=ws_error(refused.message, refused.code))
            else:
                await self.send(text_data=composer_alert(refused.message, refused.code, "refused"))
            return
        await self.send(text_data=composer_alert(outcome="accepted"))

    async def _branch_action(self, frame: dict) -> None:
        """Edit a prompt, answer one again, or show another branch (docs/API.md, branches)."""
        restore = frame.get("restore_files", True)  # a project conversation's files
        try:
            if frame["action"] == "edit":
                await accept_prompt(self.conversation_id, self.user, frame.get("content"),
                                    remember=True, edit_of=frame.get("of"),
                                    restore_files=restore)  # fmt: skip
            elif frame["action"] == "regenerate":
                await regenerate(self.conversation_id, self.user, frame.get("of"), restore)
            else:
                await switch_branch(self.conversation_id, self.user, frame.get("id"), restore)
        except RunRefused as refused:
            await self.send(text_data=composer_alert(refused.message, refused.code))

    async def _unqueue(self, queue_id) -> bool:
        # Other processes are asked only while the conversation runs (one query).
        conversation = await _conversation(self.conversation_id, self.user)
        running = conversation is not None and conversation.state == Conversation.State.RUNNING
        return await remove_queued(self.conversation_id, queue_id, running=running)

    @staticmethod
    def _parse(text_data: str | None, bytes_data: bytes | None) -> dict | str:
        if text_data is None:
            return "Frames must be JSON text."
        try:
            frame = json.loads(text_data)
        except ValueError:
            return "That frame is not valid JSON."
        if not isinstance(frame, dict):
            return "A frame must be a JSON object."
        return frame

    async def redraw(self) -> None:
        """Another branch is shown (a switch, or a new one started): the transcript is
        drawn again, whole."""
        redrawn = await _redraw(self.conversation_id, self.user)
        if redrawn is None:
            await self._refuse(NOT_FOUND)
        else:
            await self.send(text_data=redrawn)

    async def fill(self, replayed: Replayed, always: bool = False) -> None:
        """What the log holds after a seq, as a sync's answer (the page takes it where it
        continues what the page holds): asked by the page, or a gap the feed fills."""
        caught_up = await _caught_up(replayed, always)
        if caught_up is not None:
            await self.send(text_data=caught_up)
