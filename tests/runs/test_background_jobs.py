"""Background jobs through the forwarder (a process standing in for the terminal's sandbox;
the live sandbox is tests/web/test_previews_live.py): a job outlives its call, its port is
listed with its preview address and reached; its output's tail is kept; stop ends its
whole process group; a failing start, a bad request, too many jobs and a sandbox that
never answers each get a clear refusal."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
import uuid

import pytest

from agent.core.tools.background import BackgroundTool, BackgroundUnavailable, started
from agent.runs import background, previews
from agent.runs.background import ConversationJobs
from agent.runs.terminals import terminals
from testkit.live import free_port
from tests.conftest import require_bwrap
from tests.web.test_previews import forwarders, state  # noqa: F401


@pytest.fixture
def forwarder(state):  # noqa: F811
    """The forwarder in a network namespace of its own, as a terminal's sandbox has it (the
    ports it lists are its own, not other tests')."""
    require_bwrap()
    start, started = forwarders(["bwrap", "--dev-bind", "/", "/", "--unshare-net",
                                 "--die-with-parent", "--"])  # fmt: skip
    yield start
    for child in started:
        child.terminate()
        child.wait(10)


@pytest.fixture
def jobs(forwarder, monkeypatch):
    """A conversation's jobs, its sandbox's forwarder already running."""
    conversation = uuid.uuid4()
    forwarder(conversation)
    ensured = []

    async def ensure(key, owner_id, size=None):
        ensured.append((key, owner_id))

    monkeypatch.setattr(terminals, "ensure", ensure)
    found = ConversationJobs(conversation, 7)
    found.ensured = ensured
    return found


def run(coroutine):
    return asyncio.run(coroutine)


def state_of(pid: int) -> str:
    """A process's state letter ("" when gone; "Z" a zombie not yet reaped by init)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0]
    except OSError:
        return ""


def gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while state_of(pid) not in ("", "Z"):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_job_outlives_its_call_and_its_port_is_listed_and_reached(jobs):
    port = free_port()
    command = f"echo started-$((6*7)); exec python3 -m http.server {port} --bind 127.0.0.1"
    job_state = run(jobs.start(command))
    assert jobs.ensured == [(jobs.key, 7)]  # the terminal's sandbox is started first
    assert job_state["running"] and job_state["exit_code"] is None
    assert "started-42" in job_state["output"]
    assert job_state["ports"] == [{"port": port, "preview": f"/preview/{jobs.key}/{port}/"}]

    async def fetch():
        reader, writer = await previews.connect(jobs.key, port)
        writer.write(b"GET / HTTP/1.0\r\n\r\n")
        answer = await reader.read()
        writer.close()
        return answer

    assert run(fetch()).startswith(b"HTTP/1.0 200")
    (listed,) = run(jobs.jobs())
    assert listed["job"] == job_state["job"] and listed["running"]
    stopped = run(jobs.stop(job_state["job"]))
    assert stopped["job"] == job_state["job"]
    assert gone(job_state["pid"])
    deadline = time.monotonic() + 10
    while run(jobs.output(job_state["job"]))["running"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert port not in run(previews.ports(jobs.key))


def test_stop_ends_the_jobs_whole_process_group(jobs, monkeypatch):
    monkeypatch.setattr(background, "SETTLE", 0.5)
    job_state = run(jobs.start("sleep 300 & echo child=$!; trap '' TERM; sleep 301"))
    child = int(job_state["output"].split("child=")[1].split()[0])
    assert state_of(child) not in ("", "Z")
    run(jobs.stop(job_state["job"]))
    assert gone(child), "the job's own child outlived stop"
    assert gone(job_state["pid"], within=10), "a job ignoring SIGTERM outlived the SIGKILL after it"


def test_the_output_keeps_its_tail(jobs):
    job_state = run(jobs.start("head -c 100000 /dev/zero | tr '\\0' a; echo; echo END"))
    assert not job_state["running"] and job_state["exit_code"] == 0
    kept = run(jobs.output(job_state["job"]))
    assert kept["output"].endswith("END\n")
    assert len(kept["output"]) == 32768 and kept["dropped"] == 100000 + 5 - 32768


def test_a_command_that_fails_at_once_is_an_error_with_its_words(jobs):
    result = run(started(jobs, "echo no such thing >&2; exit 3"))
    assert result.is_error
    payload = json.loads(result.content)
    assert payload["error"] == "the background command exited with status 3"
    assert payload["output"] == "no such thing\n"


def test_bad_requests_and_too_many_jobs_are_refused(jobs, monkeypatch):
    monkeypatch.setattr(background, "SETTLE", 0.2)
    assert run(previews.request(jobs.key, "START 5", b"[1,2]")) == {
        "error": 'START needs {"command": "..."}'
    }
    assert "at most 65536 bytes" in run(previews.request(jobs.key, "START 999999"))["error"]
    with pytest.raises(BackgroundUnavailable, match="no job 99"):
        run(jobs.output(99))
    for _ in range(16):
        run(jobs.start("exec sleep 300"))
    with pytest.raises(BackgroundUnavailable, match="16 background jobs are running"):
        run(jobs.start("true"))
    run(jobs.stop(1))
    deadline = time.monotonic() + 10
    while run(jobs.output(1))["running"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert run(jobs.start("echo room"))["job"] == 17  # the finished one made room
    listed = [job["job"] for job in run(jobs.jobs())]
    assert 1 not in listed and 17 in listed
    for job in listed:
        run(jobs.stop(job))


def test_the_tool_reads_and_stops_jobs_and_names_its_mistakes(jobs, monkeypatch):
    monkeypatch.setattr(background, "SETTLE", 0.2)
    tool = BackgroundTool(jobs)
    job = run(jobs.start("echo one; exec sleep 300"))["job"]
    listed = json.loads(run(tool.execute({"action": "list"})).content)["jobs"]
    assert [j["job"] for j in listed] == [job]
    output = json.loads(run(tool.execute({"action": "output", "job": job})).content)
    assert output["output"] == "one\n" and output["running"]
    assert run(tool.execute({"action": "stop", "job": job})).is_error is False
    assert "needs 'job'" in run(tool.execute({"action": "output"})).content
    assert "needs 'job'" in run(tool.execute({"action": "stop", "job": True})).content
    assert "must be one of list, output, stop" in run(tool.execute({"action": "kill"})).content
    assert "no job 5" in run(tool.execute({"action": "output", "job": 5})).content


def test_a_sandbox_that_never_answers_is_said_so(state, monkeypatch):  # noqa: F811
    async def ensure(key, owner_id, size=None):
        pass

    monkeypatch.setattr(terminals, "ensure", ensure)
    monkeypatch.setattr(background, "READY_WITHIN", 0.3)
    lonely = ConversationJobs(uuid.uuid4(), 7)
    with pytest.raises(BackgroundUnavailable, match="terminal sandbox did not start"):
        run(lonely.start("true"))
    assert run(lonely.jobs()) == []  # no terminal, no jobs
    os.makedirs(previews.directory(lonely.key), exist_ok=True)
    with pytest.raises(BackgroundUnavailable, match="terminal is not running"):
        run(lonely.output(1))


def test_a_forwarder_that_does_not_know_jobs_is_named(state, monkeypatch):  # noqa: F811
    """A terminal started before the server learnt jobs answers START as a bad port."""
    conversation = uuid.uuid4()
    monkeypatch.chdir(previews.directory(conversation))  # (a socket's address is short)
    old = socket.socket(socket.AF_UNIX)
    old.bind("s")
    old.listen()

    def answer():
        connection, _ = old.accept()
        connection.recv(64)
        connection.sendall(b"ERR not a port\n")
        connection.close()

    threading.Thread(target=answer, daemon=True).start()
    with pytest.raises(previews.PreviewUnavailable, match="predates background jobs"):
        run(previews.request(conversation, "JOBS"))
    old.close()
