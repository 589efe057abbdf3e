"""A page's terminals, out: each pane a socket shows (the Terminal panel's shell, a CLI
agent's pane) followed by a task of the socket's own, written as ``terminal`` frames
(docs/API.md, "WebSocket frames").

On joining, and whenever it lost the thread (the pane printed faster than its stream
keeps), the page gets the pane's screen as tmux holds it (``reset``: its emulator starts
over from it); then what the pane prints, as it comes. A new session (a shell started
again) starts over from its first byte. A resize of the shell sends the size first, so
every page's emulator matches the pane before it draws what the program redraws.

What goes out per socket is bounded: at most ``MAX_FRAME`` bytes per ``POLL`` interval
and pane; a pane that prints more falls behind its stream, which then says so, and the
page gets the screen instead of the backlog. The pane's bytes are hostile and go out as
JSON strings, for the page's terminal emulator alone (never HTML).
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable

from agent.core.terminal import stream
from agent.core.terminal.screen import RESET, capture
from agent.runs.terminals import SIZE_FILE, Pane, read_size, tmux

log = logging.getLogger(__name__)

POLL = 0.05  # seconds between reads of a pane's stream
# While the pane has no session: a session's start is announced to the conversation's pages
# (``terminal.started``: agent/runs/groups.py), which wakes the tail; this look is for a
# notice lost on the way. Most pages never have a terminal: a look twice a second per
# socket was 2% of a 250-session server's event loop.
IDLE_POLL = 5.0
MAX_FRAME = 65536  # bytes of a pane's output per frame, and per POLL
SCREEN_AGAIN_SECONDS = 1.0  # a page's asking for the screen again: at most once in this time

Send = Callable[[dict], Awaitable[None]]


def frame(pane: Pane, data: str, **extra) -> dict:
    return {"type": "terminal", "pane": pane.name, "data": data, **extra}


class Tail:
    def __init__(self, pane: Pane, send: Send) -> None:
        self.pane, self.send = pane, send
        self.instance: str | None = None
        self.reader: stream.Reader | None = None
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.size_stamp: int | None = None
        self.task: asyncio.Future | None = None
        self.screen_due = False
        self.screen_sent = 0.0  # loop time
        self.woken = asyncio.Event()  # a session started: look now

    def screen_again(self) -> None:
        """The page asks for the pane's screen (its terminal script arrived after the
        socket's first screen went by): sent on a coming step, at most once per
        SCREEN_AGAIN_SECONDS however often it is asked (each is a tmux capture)."""
        self.screen_due = True

    def wake(self) -> None:
        """A session of the pane started (or may have): the next look is now."""
        self.woken.set()

    async def run(self) -> None:
        try:
            while True:
                delay = await self.step()
                if delay == IDLE_POLL:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.woken.wait(), delay)
                    self.woken.clear()
                else:
                    await asyncio.sleep(delay)
        finally:
            if self.reader is not None:
                self.reader.close()

    async def step(self) -> float:
        """One look at the pane; how long to wait before the next."""
        name = stream.current(self.pane.directory)
        if name is None:
            return IDLE_POLL
        if name != self.instance:
            joining = self.instance is None
            self.instance = name
            await self._start(os.path.join(self.pane.directory, name), joining)
        elif self.screen_due and self._since_screen() >= SCREEN_AGAIN_SECONDS:
            await self._start(os.path.join(self.pane.directory, name), joining=True)
        await self._size()
        try:
            data = self.reader.read(MAX_FRAME)
        except stream.Lost:
            await self._start(self.reader.instance, joining=True)
            return POLL
        if data:
            await self.send(frame(self.pane, self.decoder.decode(data)))
        return POLL

    def _since_screen(self) -> float:
        return asyncio.get_running_loop().time() - self.screen_sent

    async def _start(self, instance: str, joining: bool) -> None:
        if self.reader is not None:
            self.reader.close()
        self.decoder.reset()
        self.screen_due, self.screen_sent = False, asyncio.get_running_loop().time()
        if not joining:  # a new session: its stream from its first byte
            self.reader = stream.Reader(instance, at_end=False)
            size = read_size(self.pane) or (80, 24)
            await self.send(frame(self.pane, RESET, reset=True, cols=size[0], rows=size[1]))
            return
        # Where the stream is now, then the screen: what the pane prints in between is
        # drawn twice (it converges), never lost.
        self.reader = stream.Reader(instance, at_end=True)
        screen = await capture(tmux(), self.pane.target)
        if screen is None:
            size = read_size(self.pane) or (80, 24)
            await self.send(frame(self.pane, RESET, reset=True, cols=size[0], rows=size[1]))
        else:
            await self.send(frame(self.pane, screen.data, reset=True, cols=screen.cols,
                                  rows=screen.rows))  # fmt: skip

    async def _size(self) -> None:
        try:
            stamp = os.stat(os.path.join(self.pane.directory, SIZE_FILE)).st_mtime_ns
        except OSError:
            return
        if stamp == self.size_stamp:
            return
        first = self.size_stamp is None
        self.size_stamp = stamp
        size = read_size(self.pane)
        if size is not None and not first:
            await self.send(frame(self.pane, "", cols=size[0], rows=size[1]))


def follow(panes: list[Pane], send: Send) -> list[Tail]:
    """A tail per pane, its task writing its frames with ``send`` until cancelled."""
    tails = [Tail(pane, send) for pane in panes]
    for tail in tails:
        tail.task = asyncio.ensure_future(_quietly(tail))
    return tails


async def _quietly(tail: Tail) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        try:
            await tail.run()
        except Exception:  # the socket closed under it, or tmux went: the page reconnects
            log.warning("the %s terminal's tail ended", tail.pane.name, exc_info=True)
