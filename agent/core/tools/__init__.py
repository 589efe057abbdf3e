"""The agent's tools, each bound to one workspace."""

from __future__ import annotations

from agent.core.tools.background import BackgroundTool
from agent.core.tools.base import Tool, ToolResult, tool_spec
from agent.core.tools.bash import MODES as BASH_MODES
from agent.core.tools.bash import BashTool
from agent.core.tools.cgroup_host import SandboxLimits
from agent.core.tools.files import EditTool, ReadTool, WriteTool
from agent.core.tools.search import GrepTool, ListDirTool
from agent.core.tools.workspace import PathError, Workspace

TOOL_NAMES = ("read", "grep", "list_dir", "write", "edit", "bash", "background")

__all__ = [
    "BASH_MODES",
    "TOOL_NAMES",
    "PathError",
    "SandboxLimits",
    "Tool",
    "ToolResult",
    "Workspace",
    "build_tools",
    "tool_spec",
]


class UnknownToolError(ValueError):
    pass


def build_tools(
    workspace: Workspace,
    bash_mode: str = "sandbox",
    names: list[str] | tuple[str, ...] | None = None,
    bash_timeout: float | None = None,
    sandbox_limits: SandboxLimits | None = None,
) -> list[Tool]:
    """The tools for ``workspace`` in a stable order; bash is absent when its mode is off,
    ``background`` unless bash is there and the workspace runs background jobs.
    ``sandbox_limits``: processes and memory of the workspace's sandboxes (the defaults of
    SandboxLimits when None)."""
    if bash_mode not in BASH_MODES:
        raise ValueError(f"bash mode must be one of {', '.join(BASH_MODES)}")
    wanted = list(names) if names is not None else list(TOOL_NAMES)
    unknown = [n for n in wanted if n not in TOOL_NAMES]
    if unknown:
        raise UnknownToolError(f"unknown tool(s): {', '.join(unknown)}")
    tools: list[Tool] = []
    for name in TOOL_NAMES:
        if name not in wanted:
            continue
        if name == "bash":
            if bash_mode == "off":
                continue
            kwargs = {"timeout": bash_timeout} if bash_timeout else {}
            tools.append(BashTool(workspace, bash_mode, limits=sandbox_limits, **kwargs))
        elif name == "background":
            # Its jobs are bash's: offered beside a bash that can start them.
            if workspace.background is not None and any(t.name == "bash" for t in tools):
                tools.append(BackgroundTool(workspace.background))
        else:
            cls = {"read": ReadTool, "grep": GrepTool, "list_dir": ListDirTool,
                   "write": WriteTool, "edit": EditTool}[name]  # fmt: skip
            tools.append(cls(workspace))
    return tools
