"""The Tool protocol and the result every tool returns (for the model, and for the page)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool produced: ``content`` goes to the model, ``display`` only to the UI."""

    content: str
    is_error: bool = False
    display: dict[str, Any] | None = None


def ok(display: dict[str, Any] | None = None, **payload: Any) -> ToolResult:
    return ToolResult(json.dumps(payload, ensure_ascii=False), False, display)


def fail(message: str, display: dict[str, Any] | None = None, **extra: Any) -> ToolResult:
    return ToolResult(json.dumps({"error": message, **extra}, ensure_ascii=False), True, display)


@runtime_checkable
class Tool(Protocol):
    name: str
    description: str
    input_schema: dict[str, Any]

    async def execute(self, params: dict[str, Any]) -> ToolResult: ...


def object_schema(*, required: tuple[str, ...], **properties: tuple[str, str]) -> dict[str, Any]:
    """A tool's input schema: a JSON object of typed, described properties, each given as
    ``name=(json type, description)``, in order."""
    return {
        "type": "object",
        "properties": {
            name: {"type": kind, "description": text} for name, (kind, text) in properties.items()
        },
        "required": list(required),
    }


def tool_spec(tool: Tool) -> dict[str, Any]:
    """The tool as declared to the Messages API."""
    return {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}


class ParamError(ValueError):
    pass


def require_str(params: dict[str, Any], name: str, *, allow_empty: bool = False) -> str:
    value = params.get(name)
    if not isinstance(value, str):
        raise ParamError(f"'{name}' is required and must be a string")
    if not allow_empty and value == "":
        raise ParamError(f"'{name}' must not be empty")
    return value


def optional_int(params: dict[str, Any], name: str) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParamError(f"'{name}' must be an integer")
    return value
