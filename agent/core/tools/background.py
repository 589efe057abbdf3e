"""Commands that outlive their call (a dev server, a watcher): ``bash`` with ``background``
starts one, the ``background`` tool lists them, reads a job's output and stops one.

Where they run is the workspace's ``background`` (a ``Jobs``; agent/runs/background.py
runs them in the conversation's terminal sandbox, whose ports the Preview panel reaches).
"""

from __future__ import annotations

from typing import Any, Protocol

from agent.core.tools.base import ToolResult, fail, ok

ACTIONS = ("list", "output", "stop")


class BackgroundUnavailable(Exception):
    """Said to the model: why a background command could not be started or reached."""


class Jobs(Protocol):
    """One conversation's background jobs. Each answer is a job's state: ``job``,
    ``pid``, ``command``, ``running``, ``exit_code``; ``output`` (its tail) where said."""

    async def start(self, command: str) -> dict[str, Any]:
        """Starts ``command``; its state a few seconds later, with its output so far and
        ``ports``: what began to listen meanwhile (``port``, ``preview`` address)."""
        ...

    async def jobs(self) -> list[dict[str, Any]]: ...

    async def output(self, job: int) -> dict[str, Any]: ...

    async def stop(self, job: int) -> dict[str, Any]: ...


def started(jobs: Jobs, command: str):
    """bash's ``background``: the result of starting ``command`` (a coroutine)."""

    async def run() -> ToolResult:
        try:
            state = await jobs.start(command)
        except BackgroundUnavailable as exc:
            return fail(f"the command could not start in the background: {exc}")
        display = {"kind": "bash", "exit_code": state.get("exit_code"), "background": True}
        if not state.get("running") and state.get("exit_code") not in (0, None):
            return fail(f"the background command exited with status {state['exit_code']}",
                        display, **state)  # fmt: skip
        return ok(display, **state)

    return run()


class BackgroundTool:
    name = "background"
    description = (
        "The commands bash started with background: true, which keep running after their "
        "call in the conversation's terminal sandbox (the same workspace, limits and network "
        "as bash, a separate process namespace: bash's own `ps` and `kill` do not see them). "
        "action 'list': every job and whether it runs; 'output': the last 32 KB of a job's "
        "output (stdout and stderr); 'stop': SIGTERM to the job's process group, SIGKILL "
        "3 s later. A job ends when the conversation's terminal ends."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "action": {
                "type": "string",
                "enum": list(ACTIONS),
                "description": "list, output or stop",
            },  # fmt: skip
            "job": {"type": "integer", "description": "The job's number (output, stop)"},
        },
        "required": ["action"],
    }

    def __init__(self, jobs: Jobs):
        self.jobs = jobs

    async def execute(self, params: dict[str, Any]) -> ToolResult:
        action, job = params.get("action"), params.get("job")
        if action not in ACTIONS:
            return fail(f"'action' must be one of {', '.join(ACTIONS)}")
        if action != "list" and (not isinstance(job, int) or isinstance(job, bool)):
            return fail(f"'{action}' needs 'job', a job's number (action 'list' shows them)")
        try:
            if action == "list":
                return ok(jobs=await self.jobs.jobs())
            state = await (self.jobs.output(job) if action == "output" else self.jobs.stop(job))
        except BackgroundUnavailable as exc:
            return fail(str(exc))
        return ok(**state)
