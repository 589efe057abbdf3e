"""An OpenAI Responses API request (what Codex sends) as a Messages API request.

Pure functions on JSON-shaped dicts, no I/O. The request comes from a sandboxed CLI: hostile
input. What has no equivalent upstream is refused with ``Unsupported`` (a 400 naming it),
never dropped in silence; hints that change nothing the model is asked (caching keys,
client metadata, ``store``, ``include``) are accepted and ignored.

The mapping:
- ``instructions`` and the leading ``system`` / ``developer`` messages → ``system``; a later
  developer message (Codex's updates of the environment) → a user text, in its place.
- ``message`` items → messages (text, images by data or https URL); consecutive items of one
  role are merged, so tool calls and their results alternate as the Messages API wants.
- ``function_call`` → ``tool_use`` (its JSON arguments as the input); ``custom_tool_call``
  (a freeform tool such as ``apply_patch``) → ``tool_use`` with ``{"input": <the text>}``;
  their outputs → ``tool_result``.
- ``reasoning`` → the ``thinking`` block it came from (carried in ``encrypted_content``, see
  ``openai_stream.reasoning_blob``); one without it cannot be replayed and is left out, as
  the Messages API itself leaves out thinking of earlier turns.
- tools: ``function`` → a tool; ``custom`` → a tool with one string input ``input``;
  ``namespace`` → its functions, named ``<namespace>__<name>``; server-side tools (web
  search, file search, code interpreter, MCP…) → refused (the sandbox has no network, and
  neither may the model on its behalf).
- ``reasoning.effort`` → extended thinking with a budget; ``max_output_tokens`` →
  ``max_tokens``; ``tool_choice`` and ``parallel_tool_calls`` → ``tool_choice``.
- ``previous_response_id``, ``background``, ``conversation``, structured output
  (``text.format`` other than text) → refused: nothing is stored between calls here, and
  Codex sends its whole input each time (``store: false``).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MAX_TOKENS = 16384
MAX_TOKENS_CAP = 64000
THINKING_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 24576}
NAMESPACE_SEPARATOR = "__"
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
CUSTOM_INPUT = "input"  # the one string property a custom tool's call carries
IMAGE_DATA = re.compile(r"^data:(image/(?:png|jpeg|gif|webp));base64,(.*)$", re.DOTALL)
REFUSED_FIELDS = {
    "previous_response_id": "previous_response_id is not supported here: nothing is stored "
    "between calls; send the whole input (store: false)",
    "conversation": "conversations are not stored here; send the whole input",
    "background": "background responses are not supported here",
    "prompt": "stored prompt templates are not supported here",
}


class Unsupported(ValueError):
    """The request asks for something the upstream cannot do (a 400, with this message)."""


@dataclass
class Translated:
    """The Messages API request, and what the answer's translation needs to know."""

    body: dict[str, Any]
    custom_tools: frozenset[str] = frozenset()  # tool names whose calls are freeform text
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)  # flat → (ns, name)


def translate(request: Any) -> Translated:
    """The Messages API body for a Responses API request (``Unsupported`` when it cannot)."""
    if not isinstance(request, dict):
        raise Unsupported("the request must be a JSON object")
    for name, why in REFUSED_FIELDS.items():
        if request.get(name) not in (None, False, ""):
            raise Unsupported(why)
    model = request.get("model")
    if not isinstance(model, str) or not model:
        raise Unsupported("model must be a non-empty string")
    _check_text_format(request.get("text"))
    tools, custom, namespaced = _tools(request.get("tools"))
    system, messages = _input(request.get("input"), request.get("instructions"), namespaced)
    limit = _max_tokens(request.get("max_output_tokens"))
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": True,
                            "max_tokens": limit}  # fmt: skip
    if system:
        body["system"] = system
    if tools:
        body["tools"] = tools
        choice = _tool_choice(request.get("tool_choice"), namespaced)
        if request.get("parallel_tool_calls") is False:
            choice["disable_parallel_tool_use"] = True
        body["tool_choice"] = choice
    _sampling(body, request)
    return Translated(body, frozenset(custom), namespaced)


def _max_tokens(value: Any) -> int:
    if value is None:
        return DEFAULT_MAX_TOKENS
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise Unsupported("max_output_tokens must be a positive integer")
    return min(value, MAX_TOKENS_CAP)


def _sampling(body: dict, request: dict) -> None:
    reasoning = request.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    if effort not in (None, "none") and effort not in THINKING_BUDGETS:
        raise Unsupported(f"reasoning.effort {str(effort)[:40]!r} is not one of "
                          f"{', '.join(THINKING_BUDGETS)}")  # fmt: skip
    if effort in THINKING_BUDGETS:
        budget = THINKING_BUDGETS[effort]
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        body["max_tokens"] = max(body["max_tokens"], budget + 4096)
        return  # thinking takes no temperature or top_p upstream
    for name in ("temperature", "top_p"):
        value = request.get(name)
        if value is not None:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise Unsupported(f"{name} must be a number")
            body[name] = value


def _check_text_format(text: Any) -> None:
    if text is None:
        return
    if not isinstance(text, dict):
        raise Unsupported("text must be an object")
    fmt = text.get("format")
    if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text"):
        raise Unsupported("structured output (text.format other than text) is not supported here")


# -- tools ---------------------------------------------------------------------------------


def _tools(tools: Any) -> tuple[list[dict], set[str], dict[str, tuple[str, str]]]:
    if tools is None:
        return [], set(), {}
    if not isinstance(tools, list):
        raise Unsupported("tools must be a list")
    out: list[dict] = []
    custom: set[str] = set()
    namespaced: dict[str, tuple[str, str]] = {}
    for tool in tools:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function":
            out.append(_function_tool(tool, tool.get("name")))
        elif kind == "custom":
            out.append(_custom_tool(tool))
            custom.add(tool["name"])
        elif kind == "namespace":
            namespace = _name(tool.get("name"), "a namespace")
            inner = tool.get("tools")
            if not isinstance(inner, list):
                raise Unsupported(f"namespace {namespace!r} must list its tools")
            for member in inner:
                if not isinstance(member, dict) or member.get("type") != "function":
                    raise Unsupported(f"namespace {namespace!r} may hold function tools only")
                name = _name(member.get("name"), "a tool")
                flat = namespace + NAMESPACE_SEPARATOR + name
                out.append(_function_tool(member, flat))
                namespaced[flat] = (namespace, name)
        else:
            raise Unsupported(f"the tool type {str(kind)[:40]!r} has no equivalent here "
                              "(server-side tools are not available: the sandbox has no "
                              "network)")  # fmt: skip
    names = [t["name"] for t in out]
    if len(set(names)) != len(names):
        raise Unsupported("tool names must be unique")
    return out, custom, namespaced


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise Unsupported(f"{what} needs a name")
    return value


def _function_tool(tool: dict, name: Any) -> dict:
    name = _tool_name(name)
    schema = tool.get("parameters")
    if schema is None:
        schema = {"type": "object", "properties": {}}
    if not isinstance(schema, dict):
        raise Unsupported(f"the parameters of {name!r} must be a JSON schema object")
    out = {"name": name, "input_schema": schema}
    if isinstance(tool.get("description"), str) and tool["description"]:
        out["description"] = tool["description"]
    return out


def _custom_tool(tool: dict) -> dict:
    name = _tool_name(tool.get("name"))
    description = tool.get("description") if isinstance(tool.get("description"), str) else ""
    fmt = tool.get("format")
    detail = "The tool's whole input, as plain text."
    if isinstance(fmt, dict) and fmt.get("type") == "grammar":
        syntax = str(fmt.get("syntax", ""))[:20]
        detail = (f"The tool's whole input, as plain text following this {syntax} grammar:\n"
                  f"{str(fmt.get('definition', ''))}")  # fmt: skip
    schema = {"type": "object", "required": [CUSTOM_INPUT],
              "properties": {CUSTOM_INPUT: {"type": "string", "description": detail}}}  # fmt: skip
    return {"name": name, "description": description or name, "input_schema": schema}


def _tool_name(name: Any) -> str:
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise Unsupported(f"the tool name {str(name)[:70]!r} is not valid upstream "
                          "(letters, digits, _ and -, at most 64)")  # fmt: skip
    return name


def _tool_choice(choice: Any, namespaced: dict[str, tuple[str, str]]) -> dict:
    if choice in (None, "auto"):
        return {"type": "auto"}
    if choice == "none":
        return {"type": "none"}
    if choice == "required":
        return {"type": "any"}
    if isinstance(choice, dict) and choice.get("type") in ("function", "custom"):
        return {"type": "tool", "name": _tool_name(choice.get("name"))}
    raise Unsupported(f"tool_choice {str(choice)[:60]!r} is not supported here")


def flat_name(name: Any, namespace: Any) -> Any:
    """A call's tool name as the upstream knows it (a namespaced function's flattened)."""
    if isinstance(namespace, str) and namespace:
        return f"{namespace}{NAMESPACE_SEPARATOR}{name}"
    return name


# -- input ---------------------------------------------------------------------------------


class _Conversation:
    """Messages built item by item, merging consecutive blocks of one role."""

    def __init__(self) -> None:
        self.system: list[str] = []
        self.messages: list[dict] = []

    def add(self, role: str, blocks: list[dict]) -> None:
        if not blocks:
            return
        if self.messages and self.messages[-1]["role"] == role:
            self.messages[-1]["content"].extend(blocks)
        else:
            self.messages.append({"role": role, "content": list(blocks)})


def _input(items: Any, instructions: Any, namespaced: dict) -> tuple[str, list[dict]]:
    conversation = _Conversation()
    if isinstance(instructions, str) and instructions.strip():
        conversation.system.append(instructions)
    elif instructions not in (None, ""):
        raise Unsupported("instructions must be a string")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    if not isinstance(items, list):
        raise Unsupported("input must be a string or a list of items")
    for item in items:
        if not isinstance(item, dict):
            raise Unsupported("each input item must be an object")
        _item(conversation, item)
    if not conversation.messages:
        raise Unsupported("the input holds no message")
    if conversation.messages[0]["role"] != "user":
        conversation.messages.insert(0, {"role": "user", "content": [
            {"type": "text", "text": "(continue)"}]})  # fmt: skip
    return "\n\n".join(conversation.system), conversation.messages


def _item(conversation: _Conversation, item: dict) -> None:
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        role = item.get("role")
        if role in ("system", "developer"):
            text = "\n".join(b["text"] for b in _content(item.get("content"), role))
            if not conversation.messages:
                conversation.system.append(text)
            else:  # in its place: the upstream's system prompt is the conversation's start
                conversation.add("user", [{"type": "text", "text": f"<{role}>\n{text}\n</{role}>"}])
        elif role in ("user", "assistant"):
            conversation.add(role, _content(item.get("content"), role))
        else:
            raise Unsupported(f"the message role {str(role)[:20]!r} is not supported")
    elif kind in ("function_call", "custom_tool_call"):
        conversation.add("assistant", [_tool_use(item, kind)])
    elif kind in ("function_call_output", "custom_tool_call_output"):
        conversation.add("user", [_tool_result(item)])
    elif kind == "reasoning":
        conversation.add("assistant", _thinking(item))
    else:
        raise Unsupported(f"the input item type {str(kind)[:40]!r} has no equivalent here")


def _content(content: Any, role: str) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise Unsupported(f"a {role} message's content must be a string or a list")
    blocks = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            if not isinstance(part.get("text"), str):
                raise Unsupported(f"a {kind} part needs its text")
            if part["text"]:
                blocks.append({"type": "text", "text": part["text"]})
        elif kind == "refusal":
            blocks.append({"type": "text", "text": str(part.get("refusal", ""))})
        elif kind == "input_image" and role in ("user", "tool"):
            blocks.append(_image(part))
        else:
            raise Unsupported(f"the content part {str(kind)[:40]!r} is not supported in a "
                              f"{role} message here")  # fmt: skip
    return blocks


def _image(part: dict) -> dict:
    url = part.get("image_url")
    if not isinstance(url, str):
        raise Unsupported("an input_image needs an image_url (file ids are not supported)")
    match = IMAGE_DATA.match(url)
    if match:
        try:
            base64.b64decode(match.group(2), validate=True)
        except (binascii.Error, ValueError):
            raise Unsupported("an input_image's data URL is not valid base64") from None
        return {"type": "image", "source": {"type": "base64", "media_type": match.group(1),
                                            "data": match.group(2)}}  # fmt: skip
    if url.startswith("https://"):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise Unsupported("an input_image must be a PNG, JPEG, GIF or WebP data URL, or https")


def _call_id(item: dict) -> str:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id or len(call_id) > 200:
        raise Unsupported(f"a {item.get('type')} needs a call_id")
    return call_id


def _tool_use(item: dict, kind: str) -> dict:
    call_id = _call_id(item)
    name = flat_name(item.get("name"), item.get("namespace"))
    if kind == "custom_tool_call":
        text = item.get("input")
        if not isinstance(text, str):
            raise Unsupported("a custom_tool_call needs its input text")
        arguments: Any = {CUSTOM_INPUT: text}
    else:
        raw = item.get("arguments", "{}")
        try:
            arguments = json.loads(raw or "{}") if isinstance(raw, str) else None
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            raise Unsupported(f"the arguments of call {call_id[:60]!r} are not a JSON object")
    return {"type": "tool_use", "id": call_id, "name": _tool_name(name), "input": arguments}


def _tool_result(item: dict) -> dict:
    output = item.get("output")
    if isinstance(output, dict):  # {"content": ..., "success": ...} in some shapes
        output = output.get("content", output.get("text"))
    if isinstance(output, list):
        content: Any = _content(output, "tool")
    elif isinstance(output, str):
        content = output
    else:
        raise Unsupported(f"the output of call {_call_id(item)[:60]!r} must be text or parts")
    result = {"type": "tool_result", "tool_use_id": _call_id(item), "content": content}
    if item.get("success") is False or (isinstance(item.get("output"), dict)
                                         and item["output"].get("success") is False):  # fmt: skip
        result["is_error"] = True
    return result


def _thinking(item: dict) -> list[dict]:
    """The thinking block behind a reasoning item we gave, from its ``encrypted_content``."""
    blob = item.get("encrypted_content")
    if not isinstance(blob, str) or not blob:
        return []  # not ours (or no signature): it cannot be replayed upstream
    try:
        value = json.loads(base64.b64decode(blob, validate=True))
    except (binascii.Error, ValueError):
        value = None
    if isinstance(value, dict) and isinstance(value.get("redacted"), str):
        return [{"type": "redacted_thinking", "data": value["redacted"]}]
    if (isinstance(value, dict) and isinstance(value.get("thinking"), str)
            and isinstance(value.get("signature"), str)):  # fmt: skip
        return [{"type": "thinking", "thinking": value["thinking"],
                 "signature": value["signature"]}]  # fmt: skip
    raise Unsupported("a reasoning item's encrypted_content is not one this gateway gave")
