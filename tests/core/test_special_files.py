"""FIFOs, sockets and device nodes in a workspace: every file tool and the file browser
refuse them at once, no thread is left waiting on one, and the server stays responsive.

The red team's version: `mkfifo pipe` in bash, then `grep` on it blocked the event loop
(healthz, logins and every other user's API timed out); `read`/`write`/`edit` on a FIFO
each pinned a thread of the default executor forever; `GET /files/?path=pipe` parked one
OS thread per request."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import threading
import time
import urllib.request

import pytest

from agent.core.tools.fileio import workers
from agent.core.tools.files import EditTool, ReadTool, WriteTool
from agent.core.tools.search import GrepTool, ListDirTool
from agent.core.tools.workspace import PathError, Workspace
from agent.ui import browse
from testkit.api_client import Api, read_until
from testkit.live import LiveServer
from testkit.model_server import text_reply, tool_reply

CALL_DEADLINE = 5.0  # far above "milliseconds", far below "forever"


@pytest.fixture
def nodes(tmp_path):
    """A workspace holding a FIFO, a listening socket and (as root) a character device,
    plus a FIFO inside a directory that grep searches recursively."""
    root = tmp_path / "ws"
    (root / "dir").mkdir(parents=True)
    (root / "dir" / "ok.txt").write_text("needle\n")
    os.mkfifo(root / "pipe")
    os.mkfifo(root / "dir" / "pipe")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(root / "sock"))
    listener.listen()
    names = ["pipe", "sock"]
    if os.geteuid() == 0:  # /dev/zero's numbers: a read would never end
        os.mknod(root / "zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))
        names.append("zero")
    yield Workspace(root), names
    listener.close()


def _calls(name: str):
    return [
        (ReadTool, {"path": name}),
        (WriteTool, {"path": name, "content": "x"}),
        (EditTool, {"path": name, "old_str": "a", "new_str": "b"}),
        (GrepTool, {"pattern": "a", "path": name}),
        (ListDirTool, {"path": name}),
    ]


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _warm_workers(workspace: Workspace) -> None:
    """Start every file worker thread, so a later count compares like with like."""
    barrier = threading.Barrier(3)
    futures = [workers.submit(workspace, barrier.wait, 5) for _ in range(2)]
    barrier.wait(5)
    for future in futures:
        future.result(5)


def test_every_file_tool_refuses_fifos_sockets_and_devices_at_once(nodes):
    workspace, names = nodes
    _warm_workers(workspace)
    threads = _os_threads()

    async def attempt(tool_cls, params):
        started = time.monotonic()
        result = await asyncio.wait_for(tool_cls(workspace).execute(params), CALL_DEADLINE)
        return result, time.monotonic() - started

    for name in names:
        for tool_cls, params in _calls(name):
            result, took = asyncio.run(attempt(tool_cls, params))
            assert result.is_error, (tool_cls.name, name, result.content)
            message = json.loads(result.content)["error"]
            expected = "not a directory" if tool_cls is ListDirTool else "not a regular file"
            assert message.startswith(expected), (tool_cls.name, name, message)
            assert took < CALL_DEADLINE
    # Every worker is free again (none waits on a FIFO) and no thread was added: one
    # stuck on a FIFO stays for good, while a thread ending on its own (the one that
    # asyncio.run's shutdown of its executor starts, another test's server) goes.
    assert workers.submit(workspace, lambda: "free").result(2) == "free"
    deadline = time.monotonic() + CALL_DEADLINE
    while _os_threads() > threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _os_threads() <= threads


def test_grep_recursing_into_a_directory_with_a_fifo_skips_it(nodes):
    workspace, _ = nodes
    params = {"pattern": "needle", "path": ".", "recursive": True}
    result = asyncio.run(asyncio.wait_for(GrepTool(workspace).execute(params), CALL_DEADLINE))
    assert not result.is_error
    assert json.loads(result.content)["matches"] == "./dir/ok.txt:1:needle\n"


def test_the_file_browser_refuses_special_files_at_once(nodes):
    workspace, names = nodes
    for name in names:
        started = time.monotonic()
        with pytest.raises(PathError, match="not a regular file"):
            browse.browse(workspace, name)
        assert time.monotonic() - started < CALL_DEADLINE
    _, entries, _ = browse.browse(workspace, ".")
    kinds = {entry.name: entry.kind for entry in entries}
    assert all(kinds[name] == "other" for name in names)


def test_a_slow_workspace_cannot_take_every_file_worker(tmp_path):
    """Calls that never return (stuck I/O) hold at most a few workers, of their own
    workspace: another workspace's file work still runs, and the stuck caller gets a
    clear error at its deadline."""
    stuck, other = tmp_path / "stuck", tmp_path / "other"
    stuck.mkdir()
    other.mkdir()
    (other / "f.txt").write_text("fine\n")
    release = threading.Event()
    slow = Workspace(stuck)
    try:
        held = []
        with pytest.raises(PathError, match="too many file operations"):
            for _ in range(50):
                held.append(workers.submit(slow, release.wait, 30))
        assert 0 < len(held) < 8
        with pytest.raises(PathError, match="did not finish within"):
            asyncio.run(workers.run(Workspace(other), release.wait, 30, timeout=0.2))
        result = asyncio.run(ReadTool(Workspace(other)).execute({"path": "f.txt"}))
        assert json.loads(result.content) == {"content": "fine\n"}
    finally:
        release.set()


@pytest.fixture(scope="module")
def live(tmp_path_factory, model):
    server = LiveServer(tmp_path_factory.mktemp("fifo"), ANTHROPIC_API_KEY="test-key",
                        ANTHROPIC_BASE_URL=model.url, HARNESS_BASH="off",
                        HARNESS_RUNS_PER_MINUTE="100", HARNESS_SSE_HEARTBEAT="1")  # fmt: skip
    server.start()
    server.create_users("mallory")
    yield server
    server.stop()


def _healthz_seconds(url: str) -> float:
    started = time.monotonic()
    with urllib.request.urlopen(f"{url}/healthz", timeout=10) as response:
        assert json.loads(response.read())["status"] == "ok"
    return time.monotonic() - started


def test_a_run_full_of_fifo_calls_never_stalls_the_server(live, model):
    """Every tool is pointed at a FIFO in one run, through the real server; /healthz keeps
    answering within a second throughout, and the run ends normally."""
    workspace = live.root / "workspaces" / "1"
    workspace.mkdir(parents=True)
    os.mkfifo(workspace / "pipe")
    api = Api(live.url, live.manage("create_api_token", "mallory").strip())
    status, created = api.call("POST", "/api/conversations", {})
    assert status == 201
    conversation = created["id"]
    replies = [tool_reply((cls.name, params)) for cls, params in _calls("pipe")]
    model.enqueue(*replies, text_reply("done"))
    _, stream = api.events(conversation)
    assert api.call("POST", f"/api/conversations/{conversation}/prompt",
                    {"content": "poke the pipe"})[0] == 202  # fmt: skip

    latencies, stop = [], threading.Event()

    def probe():
        while not stop.is_set():
            latencies.append(_healthz_seconds(live.url))
            time.sleep(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        items = read_until(
            stream,
            lambda item: item[0] == "event" and item[2]["type"] == "status"
            and item[2]["state"] in ("idle", "error"),
            timeout=30,
        )  # fmt: skip
    finally:
        stop.set()
        prober.join()
    results = [item[2] for item in items if item[0] == "event" and item[2]["type"] == "tool_result"]
    assert len(results) == 5 and all(r["isError"] for r in results)
    assert all("not a regular file" in r["result"] or "not a directory" in r["result"]
               for r in results)  # fmt: skip
    assert items[-1][2]["state"] == "idle"
    assert latencies and max(latencies) < 1.0, latencies
