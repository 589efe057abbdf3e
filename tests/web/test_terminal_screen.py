"""A page asks for its terminals' screens again (``terminal_screen``: its terminal script
came after the socket's first screens went by): each ask is a tmux capture, so however
often a page asks, a pane's screen goes out at most once per SCREEN_AGAIN_SECONDS."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from agent.runs.terminals import Pane
from agent.web import terminal_tail


class Reader:
    def __init__(self, instance: str, at_end: bool) -> None:
        self.instance = instance

    def read(self, size: int) -> bytes:
        return b""

    def close(self) -> None:
        pass


async def test_a_page_asking_again_and_again_gets_one_screen_per_interval(tmp_path, monkeypatch):
    captures = []

    async def capture(tmux, target):
        captures.append(target)
        return SimpleNamespace(data=f"screen {len(captures)}", cols=80, rows=24)

    monkeypatch.setattr(terminal_tail.stream, "current", lambda directory: "session-1")
    monkeypatch.setattr(terminal_tail.stream, "Reader", Reader)
    monkeypatch.setattr(terminal_tail, "capture", capture)
    monkeypatch.setattr(terminal_tail, "tmux", lambda: None)
    monkeypatch.setattr(terminal_tail, "SCREEN_AGAIN_SECONDS", 0.3)
    sent = []

    async def send(frame: dict) -> None:
        sent.append(frame)

    tail = terminal_tail.Tail(Pane("shell", "=pane:", str(tmp_path)), send)
    await tail.step()  # joining: the screen
    assert [frame["data"] for frame in sent] == ["screen 1"] and sent[0]["reset"]
    for _ in range(20):  # a page (or a script) asking as fast as it can
        tail.screen_again()
        await tail.step()
    assert len(captures) == 1  # none within the interval…
    await asyncio.sleep(0.35)
    await tail.step()
    assert len(captures) == 2 and sent[-1]["data"] == "screen 2"  # …then the one asked for
    await tail.step()
    assert len(captures) == 2  # asked once, sent once


async def test_an_idle_tail_looks_when_woken_not_at_its_next_idle_look(tmp_path, monkeypatch):
    """A pane with no session is looked at again when a start is announced (``wake``):
    the idle look is seconds apart, for a notice lost on the way."""
    current = {"name": None}

    async def capture(tmux, target):
        return SimpleNamespace(data="the screen", cols=80, rows=24)

    monkeypatch.setattr(terminal_tail.stream, "current", lambda directory: current["name"])
    monkeypatch.setattr(terminal_tail.stream, "Reader", Reader)
    monkeypatch.setattr(terminal_tail, "capture", capture)
    monkeypatch.setattr(terminal_tail, "tmux", lambda: None)
    sent = []

    async def send(frame: dict) -> None:
        sent.append(frame)

    tail = terminal_tail.Tail(Pane("shell", "=pane:", str(tmp_path)), send)
    task = asyncio.ensure_future(tail.run())
    try:
        await asyncio.sleep(0.2)
        assert sent == []  # idle: no session yet
        current["name"] = "session-1"
        tail.wake()
        async with asyncio.timeout(terminal_tail.IDLE_POLL / 2):
            while not sent:
                await asyncio.sleep(0.01)
        assert sent[0]["data"] == "the screen" and sent[0]["reset"]
    finally:
        task.cancel()
