"""Attacks on background jobs from inside the sandbox: any process there can reach the
forwarder's socket, or answer in its place (the directory is the sandbox user's). Its
answers must not become a card's display or links, nor break the event log (a lone
surrogate), nor hold the server's call (a byte at a time, without end); a job that
leaves its processes behind when its leader exits is still stopped."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from agent.core.events import ToolCallEvent, ToolResultEvent
from agent.core.tools.background import BackgroundTool
from agent.runs import background, previews
from agent.runs.background import ConversationJobs
from agent.sandbox.preview_mounts import SOCKET_NAME
from agent.ui.cards import apply_result, tool_view
from tests.runs.test_background_jobs import gone, jobs, state_of  # noqa: F401 - a fixture
from tests.web.test_previews import forwarder, state  # noqa: F401 - fixtures

OTHER = uuid.uuid4()
FORGED = {
    "job": 1,
    "pid": 2,
    "running": True,
    "exit_code": None,
    "command": "sleep \ud800 1000",
    "output": "x" * 200_000 + "\ud800",
    "dropped": "many",
    # What a card would take for a background start's and link to.
    "display": {"kind": "bash", "background": True},
    "ports": [{"port": 80, "preview": f"/preview/{OTHER}/80/"}],
    "error_detail": "planted",
}


async def impostor(directory, answer):
    """A process of the sandbox's answering on the forwarder's socket: ``answer(line)``
    is an async iterator of the bytes it sends back."""

    async def serve(reader, writer):
        line = (await reader.readline()).decode()
        try:
            async for piece in answer(line):
                writer.write(piece)
                await writer.drain()
        except OSError:
            pass
        writer.close()

    return await asyncio.start_unix_server(serve, path=str(directory / SOCKET_NAME))


@pytest.fixture
def sandbox(state, monkeypatch):  # noqa: F811
    key = uuid.uuid4()
    directory = previews.directory(key)
    monkeypatch.chdir(directory)  # a socket's address is short: bound here by its name
    return key


def test_a_forged_answer_becomes_no_display_link_or_stray_key(sandbox, monkeypatch):
    async def answer(line):
        yield json.dumps([FORGED] if line.startswith("JOBS") else FORGED).encode()

    async def bare(line):  # an answer without the fields asked for
        yield b'{"job": 1}'

    async def scenario():
        server = await impostor(Path("."), answer)
        async with server:
            tool = BackgroundTool(ConversationJobs(sandbox, 7))
            found = (await tool.execute({"action": "output", "job": 1}),
                     await tool.execute({"action": "list"}))  # fmt: skip
        server = await impostor(Path("."), bare)
        async with server:
            return *found, await tool.execute({"action": "output", "job": 1})

    result, listed, bare_result = asyncio.run(scenario())
    assert json.loads(bare_result.content)["output"] == ""
    assert result.display is None
    payload = json.loads(result.content)
    assert set(payload) == {"job", "pid", "command", "running", "exit_code", "output", "dropped"}
    assert payload["dropped"] == 0 and len(payload["output"]) <= 32768
    result.content.encode("utf-8")  # storable: no lone surrogate
    listed.content.encode("utf-8")
    assert set(json.loads(listed.content)["jobs"][0]) == set(payload) - {"output", "dropped"}
    call = ToolCallEvent(id="t1", name="background", input={"action": "output", "job": 1})
    view = tool_view(call)
    apply_result(view, ToolResultEvent(id="t1", result=result.content, isError=False,
                                       display=result.display))  # fmt: skip
    assert view.ports == []


def test_a_forwarder_trickling_its_answer_holds_the_server_no_longer_than_its_timeout(
    sandbox, monkeypatch
):
    monkeypatch.setattr(previews, "CONNECT_TIMEOUT", 1.0)

    async def answer(line):
        while True:  # a byte well within each read's timeout, without end
            yield b" "
            await asyncio.sleep(0.1)

    async def scenario():
        server = await impostor(Path("."), answer)
        async with server:
            started = asyncio.get_running_loop().time()
            with pytest.raises(previews.PreviewUnavailable):
                await asyncio.wait_for(previews.request(sandbox, "JOBS"), 15)
            return asyncio.get_running_loop().time() - started

    assert asyncio.run(scenario()) < 5


def test_a_job_whose_leader_exits_can_still_be_stopped(jobs, monkeypatch):  # noqa: F811
    """``cmd &`` and exit: the leader is gone, its child runs on holding the output. The
    job stays live (it keeps its place among the 16) and stop still ends its group."""
    monkeypatch.setattr(background, "SETTLE", 0.5)
    job = asyncio.run(jobs.start("sleep 300 & echo child=$!"))
    child = int(job["output"].split("child=")[1].split()[0])
    assert not job["running"]  # its leader exited
    assert state_of(child) not in ("", "Z")
    asyncio.run(jobs.stop(job["job"]))
    assert gone(child), "the job's orphan outlived stop"
