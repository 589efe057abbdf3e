"""The Terminal panel driven over the real socket of a live Daphne server (a root server:
the broker starts the shell in the owner's sandbox, as their uid): a command's output
arrives, a resize takes effect, a full-screen program's escape sequences arrive, the shell
survives the socket (a reconnect gets the screen, then live output), a viewer's keys are
refused and an anonymous or other user's socket never opens."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from testkit.live import LiveServer
from tests.web.test_revocation_live import home_conversation, sign_in

pytestmark = pytest.mark.slow

WAIT = 30.0
# A foreground program that says when it runs (the typed line shows "sle""eping", never
# the word it prints).
RUNNING = "sh -c 'echo sle\"\"eping; exec sleep 600'\r"


def prompted(screen: str) -> bool:
    return "/workspace $" in screen  # the shell's prompt (a screen drops its last space)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    from tests.conftest import require_bwrap

    require_bwrap()
    if shutil.which("tmux") is None:
        if os.environ.get("HARNESS_REQUIRE_SERVICES") == "1":
            pytest.fail("tmux is required (HARNESS_REQUIRE_SERVICES=1)")
        pytest.skip("tmux is not installed")
    root = tmp_path_factory.mktemp("terminal")
    server = LiveServer(root, HARNESS_AGENT_STATE=str(root / "state"),
                        HARNESS_TERMINALS_PER_USER="2")  # fmt: skip
    # Started as a shell starts a job in the background: SIGINT and SIGQUIT ignored, which
    # stays so across exec. The shell's Ctrl-C must still interrupt its program.
    ignored = (signal.SIGINT, signal.SIGQUIT)
    before = [signal.signal(number, signal.SIG_IGN) for number in ignored]
    try:
        server.start()
    finally:
        for number, handler in zip(ignored, before, strict=True):
            signal.signal(number, handler)
    server.create_users("tess", "vic", "col", "eve", "una")
    server.socket = str(root / "state" / "tmux.sock")
    try:
        yield server
    finally:
        server.stop()
        subprocess.run(["tmux", "-S", server.socket, "kill-server"], capture_output=True)


class Page:
    """One page's socket: what its terminal frames drew, per pane."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.screens: dict[str, str] = {}
        self.frames: list[dict] = []
        self.other: list[str] = []

    async def send(self, frame: dict) -> None:
        await self.ws.send(json.dumps(frame))

    async def until(self, predicate, pane: str = "shell", timeout: float = WAIT) -> str:
        """Reads frames until what ``pane`` drew (since the last reset) satisfies it."""
        try:
            await asyncio.wait_for(self._read_until(predicate, pane), timeout)
        except TimeoutError:
            raise AssertionError(f"the {pane} terminal never showed it: {self.screens!r}") from None
        return self.screens[pane]

    async def _read_until(self, predicate, pane: str) -> None:
        if True:
            while not predicate(self.screens.get(pane, "")):
                message = await self.ws.recv()
                if not message.startswith("{"):
                    self.other.append(message)
                    continue
                frame = json.loads(message)
                if frame.get("type") != "terminal":
                    continue
                self.frames.append(frame)
                if frame.get("reset"):
                    self.screens[frame["pane"]] = ""
                self.screens[frame["pane"]] = self.screens.get(frame["pane"], "") + frame["data"]

    async def typed(self, text: str) -> None:
        await self.send({"action": "terminal_input", "data": text})


def _socket(live: LiveServer, session: str, conversation: str):
    return connect(f"{live.url.replace('http://', 'ws://')}/ws/c/{conversation}/",
                   origin=live.url, additional_headers={"Cookie": f"sessionid={session}"},
                   max_size=None)  # fmt: skip


def _share(live: LiveServer, conversation: str, username: str, role: str) -> None:
    live.manage("shell", "-c", "from agent.models import Conversation; "
                "from agent.web.sharing import set_member; "
                f"set_member(Conversation.objects.get(pk='{conversation}'), '{username}', "
                f"'{role}')")  # fmt: skip


@contextlib.asynccontextmanager
async def ready_shell(live: LiveServer, username: str):
    """A page of ``username``'s conversation, its shell (100×30) at its prompt: (the page,
    the session, the conversation)."""
    session = sign_in(live, username, f"pw-{username}-1234")
    conversation = home_conversation(live, session)
    async with _socket(live, session, conversation) as ws:
        page = Page(ws)
        await page.send({"action": "terminal_resize", "cols": 100, "rows": 30})
        await page.until(prompted)
        yield page, session, conversation


async def test_a_command_runs_in_the_owners_sandbox_and_its_output_arrives(live):
    async with ready_shell(live, "tess") as (page, _, _):
        await page.typed("echo made-$((6*7)) > made.txt; cat made.txt; id -u; hostname\r")
        screen = await page.until(lambda s: "sandbox" in s.split("hostname")[-1])  # bwrap's
        uid = re.search(r"made-42\r\n(\d+)\r\nsandbox", screen)
        assert uid and int(uid[1]) >= 1000  # the owner's uid, not root's
        # In the owner's workspace: the Files panel's file.
        workspace = live.root / "workspaces"
        assert any(p.read_text() == "made-42\n" for p in workspace.rglob("made.txt"))
        # A resize reaches the shell's terminal.
        await page.send({"action": "terminal_resize", "cols": 91, "rows": 27})
        await page.until(lambda s: any(f.get("cols") == 91 for f in page.frames))
        await page.typed("stty size\r")
        await page.until(lambda s: "27 91" in s)
        # Ctrl-C reaches the foreground program (the shell has job control). Sent once the
        # program runs: a Ctrl-C that comes first flushes the terminal's unread input (keys
        # typed ahead, the command itself) and the shell drops the line it was reading.
        await page.typed(RUNNING)
        await page.until(lambda s: "sleeping" in s)
        await page.typed("\x03")
        await page.typed("echo after-$((1+1))\r")
        await page.until(lambda s: "after-2" in s.split("echo after-")[-1])


async def test_a_full_screen_programs_escape_sequences_arrive_and_a_reconnect_gets_the_screen(
    live,
):
    session = sign_in(live, "tess", "pw-tess-1234")
    conversation = home_conversation(live, session)
    async with _socket(live, session, conversation) as ws:
        page = Page(ws)
        await page.send({"action": "terminal_resize", "cols": 80, "rows": 24})
        await page.until(prompted)
        await page.typed("printf '\\033[?1049h\\033[2J\\033[5;10H\\033[1;31mFULL-SCREEN\\033[0m'; "
                         "sleep 600\r")  # fmt: skip
        # The alternate screen, the cursor move and the colour arrive as they are.
        await page.until(lambda s: "\x1b[?1049h" in s and "\x1b[5;10H" in s and "FULL-SCREEN" in s)
    # The shell outlived the socket: a new page gets the screen as tmux holds it.
    async with _socket(live, session, conversation) as ws:
        page = Page(ws)
        screen = await page.until(lambda s: "FULL-SCREEN" in s)
        first = next(f for f in page.frames if f["pane"] == "shell")
        assert first["reset"] and (first["cols"], first["rows"]) == (80, 24)
        assert "\x1b[?1049h" in screen  # still in the program's screen
        await page.typed("\x03")  # the program ends: live output follows the screen
        await page.typed("printf '\\033[?1049l'; echo back-$((2+3))\r")
        await page.until(lambda s: "back-5" in s)


async def test_a_viewers_keys_are_refused_and_they_watch_the_owners_shell(live):
    owner = sign_in(live, "tess", "pw-tess-1234")
    conversation = home_conversation(live, owner)
    _share(live, conversation, "vic", "viewer")
    viewer = sign_in(live, "vic", "pw-vic-1234")
    async with (
        _socket(live, owner, conversation) as mine,
        _socket(live, viewer, conversation) as theirs,
    ):
        page, watcher = Page(mine), Page(theirs)
        await page.send({"action": "terminal_resize", "cols": 80, "rows": 24})
        await page.until(prompted)
        await watcher.typed("touch viewer-was-here\r")
        await watcher.send({"action": "terminal_resize", "cols": 20, "rows": 5})
        refusals = []
        async with asyncio.timeout(WAIT):
            while len(refusals) < 2:
                message = await theirs.recv()
                if "forbidden" in message:
                    refusals.append(message)
        await page.typed("echo owner-$((3*3)); ls viewer-was-here\r")
        screen = await page.until(lambda s: "owner-9" in s.split("echo owner-")[-1])
        await page.until(lambda s: "No such file" in s)
        await watcher.until(lambda s: "owner-9" in s)  # the viewer watches it live
        assert "owner-9" in screen
        assert not any(f.get("cols") == 20 for f in page.frames)  # their resize was refused


async def test_a_page_open_before_the_shell_starts_follows_it_at_once(live):
    """A shell's start is announced to the conversation's pages: one that was open and
    idle (no session to follow) shows it too. (That the notice, not the idle look, brings
    it: tests/web/test_consumer.py.)"""
    from agent.web.terminal_tail import IDLE_POLL

    session = sign_in(live, "una", "pw-una-1234")
    conversation = home_conversation(live, session)
    async with (
        _socket(live, session, conversation) as first,
        _socket(live, session, conversation) as second,
    ):
        page, other = Page(first), Page(second)
        await asyncio.sleep(0.5)  # both tails idle: the pane has no session
        await page.send({"action": "terminal_resize", "cols": 80, "rows": 24})
        await page.until(prompted)
        await other.until(prompted, timeout=IDLE_POLL * 0.6)


async def test_an_anonymous_or_other_users_socket_never_opens(live):
    owner = sign_in(live, "tess", "pw-tess-1234")
    conversation = home_conversation(live, owner)
    url = f"{live.url.replace('http://', 'ws://')}/ws/c/{conversation}/"
    with pytest.raises(InvalidStatus):
        async with connect(url, origin=live.url):
            pass
    other = sign_in(live, "eve", "pw-eve-1234")
    with pytest.raises(InvalidStatus) as refused:  # closed (4404) before it was accepted
        async with _socket(live, other, conversation):
            pass
    assert refused.value.response.status_code == 403


async def test_bad_frames_are_refused_and_an_owner_keeps_a_bounded_number_of_shells(live):
    session = sign_in(live, "col", "pw-col-1234")
    first = home_conversation(live, session)
    async with _socket(live, session, first) as ws:
        page = Page(ws)
        for bad in ({"action": "terminal_resize", "cols": 1, "rows": 24},
                    {"action": "terminal_resize", "cols": 80, "rows": 501},
                    {"action": "terminal_resize", "cols": True, "rows": 24},
                    {"action": "terminal_input", "data": "x" * 4097},
                    {"action": "terminal_input", "data": 5}):  # fmt: skip
            await page.send(bad)
        errors = []
        async with asyncio.timeout(WAIT):
            while len(errors) < 5:
                frame = json.loads(await ws.recv())
                if frame.get("type") == "terminal" and frame.get("error"):
                    errors.append(frame["error"])
        assert not os.path.exists(live.root / "state" / "terminals" / first / "current")
    # HARNESS_TERMINALS_PER_USER=2: a third shell ends the least recently used.
    names = []
    for _ in range(3):
        conversation = _new_conversation(live, "col")
        async with _socket(live, session, conversation) as ws:
            page = Page(ws)
            await page.send({"action": "terminal_resize", "cols": 80, "rows": 24})
            await page.until(prompted)
        names.append(conversation)
        time.sleep(1.1)  # tmux's activity times are in whole seconds
    out = subprocess.run(["tmux", "-S", live.socket, "list-sessions", "-F", "#{session_name}"],
                         capture_output=True, text=True).stdout.split()  # fmt: skip
    assert sorted(n for n in out if n.startswith("ht-") and n[3:] in names) == sorted(
        f"ht-{n}" for n in names[1:]
    )


def _new_conversation(live: LiveServer, username: str) -> str:
    code = ("from agent.models import Conversation, User; print(Conversation.objects.create("
            f"owner=User.objects.get(username='{username}'), model='m').id)")  # fmt: skip
    return live.manage("shell", "-c", code).split()[-1]


async def test_a_flood_of_output_stays_bounded_on_disk_and_on_the_socket(live):
    from agent.core.terminal.stream import CAP

    session = sign_in(live, "tess", "pw-tess-1234")
    conversation = home_conversation(live, session)
    async with _socket(live, session, conversation) as ws:
        page = Page(ws)
        await page.send({"action": "terminal_resize", "cols": 80, "rows": 24})
        await page.until(prompted)
        await page.typed("head -c 12000000 /dev/zero | tr '\\0' y; echo; echo flood-$((5+5))\r")
        await page.until(lambda s: "flood-10" in s.split("echo flood-")[-1], timeout=180)
        # The page got the screen when it fell behind, not the whole flood.
        assert sum(len(f["data"]) for f in page.frames) < 6_000_000
        assert any(f.get("reset") for f in page.frames[1:])
    directory = live.root / "state" / "terminals" / conversation
    assert sum(p.stat().st_size for p in directory.rglob("*.out")) <= 3 * CAP


async def test_a_project_conversations_shell_works_in_its_worktree_and_sees_no_other(live):
    from testkit.api_client import Api

    api = Api(live.url, live.manage("create_api_token", "col").split()[-1])
    status, made = api.call("POST", "/api/projects", {"name": "site"})
    assert status == 201, made
    ids = []
    for _ in range(2):
        status, conversation = api.call("POST", "/api/conversations", {"project": made["id"]})
        assert status == 201, conversation
        ids.append(conversation["id"])
    session = sign_in(live, "col", "pw-col-1234")
    async with _socket(live, session, ids[0]) as ws:
        page = Page(ws)
        await page.send({"action": "terminal_resize", "cols": 120, "rows": 24})
        await page.until(prompted)
        await page.typed("git branch --show-current; echo mine > only-here.txt; "
                         "ls -a /workspace | tr '\\n' ' '; echo; echo done-$((4*4))\r")  # fmt: skip
        screen = await page.until(lambda s: "done-16" in s.split("echo done-")[-1])
    branch = f"harness/{ids[0].replace('-', '')[:8]}"
    assert branch in screen.split("--show-current")[-1]  # the conversation's own branch
    assert ".harness-projects" not in screen.split("ls -a")[-1]  # no other worktree
    # The file is in this conversation's worktree (its Changes), not the other's.
    changes = api.call("GET", f"/api/conversations/{ids[0]}/changes")[1]
    assert [f["path"] for f in changes["files"]] == ["only-here.txt"]
    assert api.call("GET", f"/api/conversations/{ids[1]}/changes")[1]["files"] == []


async def test_after_a_server_restart_the_page_gets_the_screen_and_a_key_starts_a_new_shell(live):
    """tmux's session outlives the server: its screen is still there for the page. The
    broker ends every sandbox it started when it stops (docs/SECURITY.md), so the shell
    itself does not; the next key starts a new one."""
    session = sign_in(live, "tess", "pw-tess-1234")
    conversation = home_conversation(live, session)
    async with _socket(live, session, conversation) as ws:
        page = Page(ws)
        await page.send({"action": "terminal_resize", "cols": 80, "rows": 24})
        await page.until(prompted)
        await page.typed("echo before-$((20+1))\r")
        await page.until(lambda s: "before-21" in s.split("echo before-")[-1])
    await asyncio.to_thread(live.stop)
    await asyncio.to_thread(live.start)
    async with _socket(live, session, conversation) as ws:
        page = Page(ws)
        await page.until(lambda s: "before-21" in s)  # the screen, from tmux
        await page.typed("echo after-$((20+2))\r")
        await page.until(lambda s: "after-22" in s.split("echo after-")[-1])
