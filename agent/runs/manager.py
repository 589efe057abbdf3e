"""The runs of a server process: one asyncio task per running conversation.

``runs.start`` claims the conversation, prepares the owner's workspace and starts a
``Run``; ``runs.cancel``, ``runs.submit`` (a prompt queued on the running one) and
``runs.unqueue`` reach a run in whichever process has it, through the control channel
(``control.py``: each process listens on a channel of its own and joins a control group per
running conversation, and reaps the runs, of any process, whose lease lapsed).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import uuid

from channels.layers import get_channel_layer

from agent.core.loop import NotRunning, QueueFull
from agent.runs import control, eventlog
from agent.runs.attachments import Snapshot
from agent.runs.broadcast import announce_branch
from agent.runs.claim import (
    ALREADY_RUNNING,
    STORAGE_REFUSED,
    RunRefused,
    check_queueing,
    claim,
    release,
    remember_prompt,
)
from agent.runs.control import cancel_from_sync as cancel_from_sync
from agent.runs.control import drop_author_from_sync as drop_author_from_sync
from agent.runs.groups import control_group
from agent.runs.run import Run
from agent.server import logs, metrics
from agent.server.storage import StorageError

log = logging.getLogger(__name__)


SUBMIT_ATTEMPTS = 3  # a run may end between "running" and the queue request: start it then
QUEUE_FULL = "Too many prompts are queued on this one already; wait, or remove one."
NOT_REACHED = "A prompt is running but could not be reached to queue this one; try again."
SETTLE_WAIT = 10.0  # seconds a switch waits for a run that has answered to let go


class RunManager:
    """The runs of this process. Each process listens on a channel of its own and joins a
    control group per running conversation, so a cancel sent from any process (another
    server, the API, an admin action) reaches the run wherever it is."""

    def __init__(self) -> None:
        self._runs: dict[str, Run] = {}
        # Conversations claimed here whose run is not registered yet (the claim and the
        # workspace's preparation): the reaper renews their leases, never reaps them.
        self._starting: set[str] = set()
        self._channel: str | None = None
        self._listener: asyncio.Task | None = None
        self._reaper: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _ensure_listener(self) -> str:
        loop = asyncio.get_running_loop()
        if self._channel is None or self._loop is not loop or self._listener.done():
            layer = get_channel_layer()
            # The default prefix, always: channels_redis pops one key per prefix under one
            # lock per process, so a channel with another prefix starves every socket.
            self._channel = await layer.new_channel()
            self._loop = loop
            fresh = contextvars.Context  # not the request's context (see start())
            self._listener = loop.create_task(
                control.listen(self, layer, self._channel), context=fresh()
            )
            self._reaper = loop.create_task(control.reap(self.held), context=fresh())
        return self._channel

    def held(self) -> set[str]:
        """The conversations whose runs this process holds: running or starting."""
        return set(self._runs) | self._starting

    async def start_background(self) -> None:
        """Start this process's control listener and reaper (idempotent, per event loop)."""
        await self._ensure_listener()

    async def start(
        self,
        conversation_id,
        user_id: int,
        content: str | None,
        *,
        remember: bool = False,
        branch_from: tuple[str, int] | None = None,
        images: list[Snapshot] = (),
        restore_files: bool = True,
    ) -> Run:
        """Start a prompt (``None``: a compaction of the history) sent by ``user_id``, the
        owner or a collaborator: the run works in the owner's workspace either way.
        ``remember`` also saves it in the sender's prompt history (the page's prompts).
        ``branch_from``: (``edit`` | ``regenerate``, a prompt's seq): the run starts a new
        branch; open pages and streams are told before it streams.
        ``images``: the attached images' snapshots (``agent/runs/attachments.py``).
        ``restore_files``: a project conversation's branch starts from the files as they
        were when that prompt started (agent/runs/checkpoints.py)."""
        existing = self._runs.get(str(conversation_id))
        if existing is not None:
            if existing.agent.running:
                raise RunRefused("prompt_running", ALREADY_RUNNING)
            # Its final status is out, it is only saving: a prompt sent right away waits.
            await asyncio.shield(existing.task)
        channel = await self._ensure_listener()
        key = str(conversation_id)
        self._starting.add(key)
        try:
            return await self._start(conversation_id, channel, user_id, content, remember,
                                     branch_from, images, restore_files)  # fmt: skip
        finally:
            self._starting.discard(key)

    async def _start(self, conversation_id, channel, user_id, content, remember, branch_from,
                     images, restore_files) -> Run:  # fmt: skip
        key = str(conversation_id)
        try:
            setup = await claim(conversation_id, user_id, content, remember, branch_from, images)
        except Exception as exc:
            if eventlog.storage_full(exc):
                raise RunRefused("storage_full", STORAGE_REFUSED) from exc
            raise
        try:
            if setup.unprepared is not None:  # (the workspace, made on the claims' thread)
                raise setup.unprepared
            again = branch_from is not None and branch_from[0] == "regenerate"
            rewind_to = branch_from[1] if branch_from is not None and restore_files else None
            run = Run(setup, content, setup.workspace, setup.system, again=again,
                      rewind_to=rewind_to)  # fmt: skip
        except Exception as exc:
            with contextlib.suppress(Exception):
                await release(conversation_id)
            if isinstance(exc, StorageError) or eventlog.storage_full(exc):
                raise RunRefused("storage_full", STORAGE_REFUSED) from exc
            raise
        if setup.branched:
            with contextlib.suppress(Exception):  # (a page that missed it syncs)
                await announce_branch(
                    setup.conversation.id, setup.conversation.active_branch, setup.fork_seq
                )
        self._runs[key] = run
        layer = get_channel_layer()
        await layer.group_add(control_group(conversation_id), channel)

        async def main() -> None:
            logs.conversation_id.set(key)  # on every record of the run, its tasks' included
            log.info("run started (model %s)", setup.config.model)
            metrics.RUNS_STARTED.inc()
            try:
                await run.main()
            finally:
                log.info("run ended%s", " in an error" if run.failed else "")
                metrics.RUNS_FINISHED.inc()
                if run.failed:
                    metrics.RUNS_FAILED.inc()
                self._runs.pop(key, None)
                with contextlib.suppress(Exception):
                    await layer.group_discard(control_group(conversation_id), channel)

        # A fresh context: the run must not inherit the request's (asgiref binds thread-
        # sensitive database calls to an executor that dies with the request or socket).
        run.task = asyncio.create_task(main(), name=f"run-{key}", context=contextvars.Context())
        return run

    async def settled(self, conversation_id) -> None:
        """Waits, a few seconds at most, for this process's run of the conversation if the
        agent has answered and the run is only recording its last checkpoints and saving:
        a branch switch or a restore asked on its final status then goes through rather
        than meeting 409 ``prompt_running``."""
        run = self._runs.get(str(conversation_id))
        if run is not None and run.ending and run.task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(run.task), SETTLE_WAIT)

    def is_running(self, conversation_id) -> bool:
        return str(conversation_id) in self._runs

    def cancel_local(self, conversation_id) -> bool:
        run = self._runs.get(str(conversation_id))
        return run.agent.cancel() if run is not None else False

    async def cancel(self, conversation_id) -> bool:
        """Cancel the conversation's run in whichever process runs it. True when this
        process had it; a run elsewhere is told through the channel layer."""
        if self.cancel_local(conversation_id):
            return True
        await get_channel_layer().group_send(
            control_group(conversation_id), control.cancel_message(conversation_id)
        )
        return False

    # -- the queue -----------------------------------------------------------------------
    def _running_here(self, conversation_id) -> Run | None:
        run = self._runs.get(str(conversation_id))
        return run if run is not None and run.agent.running else None

    def queue_local(
        self, conversation_id, content: str, mode: str, queue_id=None, author=None, images=()
    ) -> str | None:
        """Queue on the run of this process; None when it runs no prompt of it."""
        run = self._running_here(conversation_id)
        if run is None:
            return None
        try:
            return run.agent.queue(content, mode, queue_id, author, images=tuple(images))
        except NotRunning:
            return None
        except QueueFull as exc:
            raise RunRefused("queue_full", QUEUE_FULL) from exc

    def drop_author_local(self, conversation_id, author: str) -> int:
        run = self._running_here(conversation_id)
        return run.agent.drop_from(author) if run is not None else 0

    def unqueue_local(self, conversation_id, queue_id: str) -> bool:
        run = self._running_here(conversation_id)
        return run.agent.unqueue(queue_id) if run is not None else False

    async def submit(
        self,
        conversation_id,
        user_id: int,
        content: str,
        mode: str,
        *,
        remember: bool = False,
        images: list[Snapshot] = (),
    ) -> str | None:
        """A prompt with a mode, sent by ``user_id`` (the owner or a collaborator): queued
        on the running prompt, wherever it runs (its queue id), or, when none runs, started
        at once (None). ``images``: its attached images' snapshots."""
        await self._ensure_listener()
        queue_id = author = None
        refs = [snapshot.ref for snapshot in images]
        for _ in range(SUBMIT_ATTEMPTS):
            if self._running_here(conversation_id) is not None:
                author = await check_queueing(conversation_id, user_id, images)
            queue_id = self.queue_local(conversation_id, content, mode, author=author,
                                        images=refs)  # fmt: skip
            if queue_id is not None:
                break
            try:
                await self.start(conversation_id, user_id, content, remember=remember,
                                 images=images)  # fmt: skip
                return None
            except RunRefused as refused:
                if refused.code != "prompt_running":
                    raise
            if self._running_here(conversation_id) is not None:
                continue  # it started here meanwhile
            # (the claim: running)
            author = await check_queueing(conversation_id, user_id, images)
            queue_id = uuid.uuid4().hex  # chosen here: the answer need only confirm it
            answer = await control.ask(conversation_id, {
                "type": "run.queue", "id": queue_id, "content": content, "mode": mode,
                "author": author, "images": [ref.to_dict() for ref in refs],
            })  # fmt: skip
            if answer is not None and answer.get("queued") == queue_id:
                break
            queue_id = None
            if answer is not None and answer.get("refused") == "queue_full":
                raise RunRefused("queue_full", QUEUE_FULL)
        if queue_id is None:
            raise RunRefused("prompt_running", NOT_REACHED)
        if remember:
            await remember_prompt(user_id, content)
        return queue_id

    async def unqueue(self, conversation_id, queue_id: str, *, running: bool = True) -> bool:
        """Take a queued prompt out, wherever its run is; False when it is not waiting (never
        queued, delivered, dropped). ``running``: whether the conversation was seen running
        (if not, no process is asked)."""
        if str(conversation_id) in self._runs or not running:
            return self.unqueue_local(conversation_id, queue_id)
        await self._ensure_listener()
        answer = await control.ask(conversation_id, {"type": "run.unqueue", "id": queue_id})
        return bool(answer and answer.get("removed"))

    # -- tool approval -------------------------------------------------------------------
    def decide_local(
        self,
        conversation_id,
        call_id: str,
        decision: str,
        reason: str | None,
        by: str,
        *,
        approve_all: bool = False,
    ) -> str | None:
        """Decide on a call of this process's run: the loop's outcome (``decided``,
        ``unknown``, ``already``); None when this process runs no prompt of it."""  # fmt: skip
        run = self._running_here(conversation_id)
        if run is None:
            return None
        return run.agent.decide(call_id, decision, reason, by, approve_all=approve_all)

    async def decide(
        self,
        conversation_id,
        call_id: str,
        decision: str,
        reason: str | None,
        by: str,
        *,
        approve_all: bool = False,
        running: bool = True,
    ) -> str | None:
        """Decide on a call waiting for approval, wherever its run is (through the control
        group, answered on the asker's channel, like the queue requests). None: no process
        runs the conversation. ``running``: whether it was seen running (if not, no process
        is asked)."""
        outcome = self.decide_local(
            conversation_id, call_id, decision, reason, by, approve_all=approve_all
        )
        if outcome is not None or str(conversation_id) in self._runs or not running:
            return outcome
        await self._ensure_listener()
        answer = await control.ask(conversation_id, {
            "type": "run.decide", "id": call_id, "decision": decision, "reason": reason,
            "by": by, "approve_all": approve_all,
        })  # fmt: skip
        return answer.get("outcome") if answer else None

    async def wait(self, conversation_id) -> None:
        run = self._runs.get(str(conversation_id))
        if run is not None and run.task is not None:
            await asyncio.shield(run.task)


runs = RunManager()
