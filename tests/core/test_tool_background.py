"""bash's ``background`` and the ``background`` tool, on a workspace whose jobs are a fake
(the forwarder's side: tests/runs/test_background_jobs.py): offered only where the
workspace runs jobs, beside bash; a background call goes to the jobs, never to a
sandbox of its own; ``read_only`` offers neither; the demo's ``serve`` starts one."""

from __future__ import annotations

import asyncio
import json

from agent.core.model.demo import plan, summarize
from agent.core.tools import build_tools
from agent.core.tools.background import BackgroundUnavailable
from testkit.model_server import text_reply


class FakeJobs:
    def __init__(self, state=None, refuse: str | None = None):
        self.started: list[str] = []
        self.state = state or {"job": 1, "pid": 40, "command": "", "running": True,
                               "exit_code": None, "output": "ready\n", "ports": []}  # fmt: skip
        self.refuse = refuse

    async def start(self, command):
        if self.refuse:
            raise BackgroundUnavailable(self.refuse)
        self.started.append(command)
        return {**self.state, "command": command}

    async def jobs(self):
        return [self.state]

    async def output(self, job):
        return self.state

    async def stop(self, job):
        return self.state


def run(coroutine):
    return asyncio.run(coroutine)


def names(tools) -> list[str]:
    return [tool.name for tool in tools]


def test_background_is_offered_only_where_the_workspace_runs_jobs_and_bash_is_there(workspace):
    bash = build_tools(workspace, "sandbox")
    assert "background" not in names(bash)
    assert "background" not in bash[-1].input_schema["properties"]
    workspace.background = FakeJobs()
    tools = build_tools(workspace, "sandbox")
    assert names(tools)[-2:] == ["bash", "background"]
    assert tools[-2].input_schema["properties"]["background"]["type"] == "boolean"
    assert "background: true" in tools[-2].description
    assert "background" not in names(build_tools(workspace, "off"))
    assert "background" not in names(
        build_tools(workspace, "sandbox", names=["read", "background"])
    )


def test_a_background_call_goes_to_the_jobs_and_says_what_listens(workspace):
    ports = [{"port": 8000, "preview": "/preview/c/8000/"}]
    jobs = FakeJobs({"job": 2, "pid": 41, "running": True, "exit_code": None,
                     "output": "Serving\n", "ports": ports})  # fmt: skip
    workspace.background = jobs
    bash = build_tools(workspace, "sandbox")[-2]
    result = run(bash.execute({"command": "python3 -m http.server", "background": True}))
    assert not result.is_error
    assert jobs.started == ["python3 -m http.server"]
    assert json.loads(result.content)["ports"] == ports
    assert result.display == {"kind": "bash", "exit_code": None, "background": True}


def test_a_background_start_refused_or_failing_is_an_error(workspace):
    workspace.background = FakeJobs(refuse="tmux is not installed on the server.")
    bash = build_tools(workspace, "sandbox")[-2]
    result = run(bash.execute({"command": "serve", "background": True}))
    assert result.is_error
    assert json.loads(result.content)["error"] == (
        "the command could not start in the background: tmux is not installed on the server."
    )
    workspace.background = FakeJobs({"job": 1, "pid": 9, "running": False, "exit_code": 127,
                                     "output": "nope: not found\n", "ports": []})  # fmt: skip
    failed = run(build_tools(workspace, "sandbox")[-2].execute({"command": "nope",
                                                               "background": True}))  # fmt: skip
    assert failed.is_error and "exited with status 127" in failed.content


def test_background_where_there_are_no_jobs_is_refused_not_run_in_the_foreground(workspace):
    bash = build_tools(workspace, "unsafe")[-1]
    result = run(bash.execute({"command": "echo ran > ran.txt", "background": True}))
    assert result.is_error and "not available here" in result.content
    assert not (workspace.root / "ran.txt").exists()


async def test_read_only_offers_neither(make_harness, model_server, workspace):
    workspace.background = FakeJobs()
    loop, _ = make_harness(tools=build_tools(workspace, "sandbox"), approval="read_only")
    model_server.enqueue(text_reply("fine"))
    await loop.prompt("go")
    offered = {tool["name"] for tool in model_server.bodies[-1]["tools"]}
    assert offered == {"read", "grep", "list_dir"}


def test_the_demo_serves_in_the_background_and_names_the_preview():
    text, call = plan("serve python3 -m http.server 8000", {"bash", "background"})
    assert call == ("bash", {"command": "python3 -m http.server 8000", "background": True})
    text, call = plan("serve python3 -m http.server 8000", {"bash"})
    assert call is None and "`serve " not in text  # not offered: the help, without the row
    result = {
        "tool_use_id": "t1",
        "content": json.dumps(
            {"job": 3, "output": "", "ports": [{"port": 8000, "preview": "/preview/c/8000/"}]}
        ),
    }
    said = summarize([result], {"t1": {"name": "bash"}})
    assert "job 3" in said and "port 8000 (`/preview/c/8000/`)" in said
