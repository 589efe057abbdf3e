"""A streamed Messages API answer as the OpenAI Responses API's streaming events.

Pure: ``ResponseStream.feed`` takes the upstream's events (dicts, as ``wire.SSEParser``
reads them) and returns the Responses events to send, in the order Codex's client reads
them: ``response.created``, ``response.in_progress``, then per output item
``response.output_item.added``, its deltas (``response.output_text.delta``,
``response.reasoning_summary_text.delta``, ``response.function_call_arguments.delta``,
``response.custom_tool_call_input.delta``), its ``….done`` events and
``response.output_item.done`` with the whole item, and last ``response.completed`` (or
``response.incomplete`` when the answer hit its token limit) with the usage, or
``response.failed`` with the error. Every event carries a ``sequence_number``.

A thinking block becomes a ``reasoning`` item whose summary is the thinking's text and whose
``encrypted_content`` carries the block itself (text and signature), so that the next
request can give it back (``openai_request._thinking``). Hostile or broken upstream input
never raises: what cannot be read is skipped, and an answer that ends without its
``message_stop`` is a failed response.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from typing import Any

from agent.core.model.openai_request import CUSTOM_INPUT, Translated

# The upstream's error types as the Responses API's codes (what Codex acts on: a context
# window error starts its compaction, a rate limit is retried after the delay it names).
ERROR_CODES = {
    "overloaded_error": "server_is_overloaded",
    "rate_limit_error": "rate_limit_exceeded",
    "api_error": "server_error",
    "authentication_error": "invalid_api_key",
    "permission_error": "permission_denied",
    "not_found_error": "model_not_found",
    "request_too_large": "request_too_large",
    "invalid_request_error": "invalid_request_error",
}
# Each upstream delta's type and the field holding its text.
DELTA_FIELDS = {"text_delta": "text", "thinking_delta": "thinking",
                "signature_delta": "signature", "input_json_delta": "partial_json"}  # fmt: skip
CONTEXT_PHRASES = ("prompt is too long", "context window", "context length")


def sse(event: dict) -> bytes:
    """One event on the wire (its type as the SSE event name, as OpenAI sends it)."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def error_object(kind: str, message: str) -> dict:
    """The Responses API's error for an upstream (or gateway) error of type ``kind``."""
    code = ERROR_CODES.get(kind, kind)
    if kind == "invalid_request_error" and any(p in message.lower() for p in CONTEXT_PHRASES):
        code = "context_length_exceeded"
    return {"type": kind, "code": code, "message": message, "param": None}


def error_body(kind: str, message: str) -> dict:
    """A plain (not streamed) error answer in the OpenAI shape."""
    return {"error": error_object(kind, message)}


def reasoning_blob(block: dict) -> str:
    """A thinking block packed into a reasoning item's ``encrypted_content``."""
    if block.get("type") == "redacted_thinking":
        value: dict = {"redacted": block.get("data", "")}
    else:
        value = {"thinking": block.get("thinking", ""), "signature": block.get("signature", "")}
    return base64.b64encode(json.dumps(value).encode()).decode()


class ResponseStream:
    def __init__(self, translated: Translated, model: str = "") -> None:
        self.custom = translated.custom_tools
        self.namespaced = translated.namespaced
        self.id = "resp_" + uuid.uuid4().hex
        self.created_at = int(time.time())
        self.model = model
        self.output: list[dict] = []
        self.usage: dict[str, int] = {}
        self.stop_reason: str | None = None
        self.status = "in_progress"
        self.error: dict | None = None
        self._seq = 0
        self._blocks: dict[int, dict] = {}  # the upstream's block index → its item's state

    # -- the response object -------------------------------------------------------------------
    def response(self) -> dict:
        body: dict[str, Any] = {
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": self.status, "model": self.model, "output": self.output,
            "error": self.error, "incomplete_details": None,
        }  # fmt: skip
        if self.status == "incomplete":
            body["incomplete_details"] = {"reason": "max_output_tokens"}
        if self.usage:
            body["usage"] = self._usage()
        return body

    def _usage(self) -> dict:
        cached = self.usage.get("cache_read_input_tokens", 0)
        prompt = (self.usage.get("input_tokens", 0) + cached
                  + self.usage.get("cache_creation_input_tokens", 0))  # fmt: skip
        output = self.usage.get("output_tokens", 0)
        return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + output}  # fmt: skip

    def _event(self, kind: str, **fields: Any) -> dict:
        event = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return event

    # -- the stream ----------------------------------------------------------------------------
    def start(self) -> list[dict]:
        return [self._event("response.created", response=self.response()),
                self._event("response.in_progress", response=self.response())]  # fmt: skip

    def feed(self, name: str | None, data: Any) -> list[dict]:
        """The events for one upstream event (``name``, its JSON)."""
        if self.status != "in_progress" or not isinstance(data, dict):
            return []
        kind = data.get("type", name)
        if kind == "error" or name == "error":
            error = data.get("error") if isinstance(data.get("error"), dict) else {}
            return self.fail(str(error.get("type") or "api_error"),
                             str(error.get("message") or "The model upstream failed."))  # fmt: skip
        if kind == "message_start" and isinstance(data.get("message"), dict):
            message = data["message"]
            if isinstance(message.get("model"), str):
                self.model = message["model"][:200]
            self._take_usage(message.get("usage"))
        elif kind == "content_block_start" and isinstance(data.get("content_block"), dict):
            return self._block_start(data.get("index"), data["content_block"])
        elif kind == "content_block_delta" and isinstance(data.get("delta"), dict):
            return self._block_delta(data.get("index"), data["delta"])
        elif kind == "content_block_stop":
            return self._block_stop(data.get("index"))
        elif kind == "message_delta":
            delta = data.get("delta") if isinstance(data.get("delta"), dict) else {}
            if isinstance(delta.get("stop_reason"), str):
                self.stop_reason = delta["stop_reason"]
            self._take_usage(data.get("usage"))
        elif kind == "message_stop":
            return self._complete()
        return []

    def finish(self) -> list[dict]:
        """The upstream's body ended: a response still going broke off."""
        if self.status != "in_progress":
            return []
        return self.fail("api_error", "The model upstream's answer broke off.")

    def fail(self, kind: str, message: str) -> list[dict]:
        self.status, self.error = "failed", error_object(kind, message[:2000])
        return [self._event("response.failed", response=self.response())]

    def _take_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        for name in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                     "cache_creation_input_tokens"):  # fmt: skip
            value = usage.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                self.usage[name] = value

    def _complete(self) -> list[dict]:
        # Blocks the upstream left open are closed first: their items are whole.
        events = [e for index in list(self._blocks) for e in self._block_stop(index)]
        self.status = "incomplete" if self.stop_reason == "max_tokens" else "completed"
        kind = "response.incomplete" if self.status == "incomplete" else "response.completed"
        return [*events, self._event(kind, response=self.response())]

    # -- blocks as items ------------------------------------------------------------------------
    def _block_start(self, index: Any, block: dict) -> list[dict]:
        if not isinstance(index, int) or index in self._blocks:
            return []
        kind = block.get("type")
        position = len(self.output)
        if kind == "text":
            item = {"type": "message", "id": "msg_" + uuid.uuid4().hex, "status": "in_progress",
                    "role": "assistant", "content": []}  # fmt: skip
            state = {"item": item, "text": "", "position": position}
            part = {"type": "output_text", "text": "", "annotations": []}
            events = [self._event("response.output_item.added", output_index=position, item=item),
                      self._event("response.content_part.added", item_id=item["id"],
                                  output_index=position, content_index=0, part=part)]  # fmt: skip
        elif kind in ("thinking", "redacted_thinking"):
            item = {"type": "reasoning", "id": "rs_" + uuid.uuid4().hex, "summary": []}
            state = {"item": item, "block": dict(block), "position": position}
            state["block"].setdefault("thinking", "")
            state["block"].setdefault("signature", "")
            events = [self._event("response.output_item.added", output_index=position, item=item)]
            if kind == "thinking":
                events.append(self._event("response.reasoning_summary_part.added",
                                          item_id=item["id"], output_index=position,
                                          summary_index=0,
                                          part={"type": "summary_text", "text": ""}))  # fmt: skip
        elif kind == "tool_use":
            item = self._call_item(block)
            state = {"item": item, "json": "", "position": position}
            events = [self._event("response.output_item.added", output_index=position, item=item)]
        else:
            return []  # a block type the Responses API has no item for (none is expected)
        self._blocks[index] = state
        self.output.append(item)
        return events

    def _call_item(self, block: dict) -> dict:
        name = str(block.get("name", ""))[:200]
        call_id = str(block.get("id", ""))[:200]
        if name in self.custom:
            return {"type": "custom_tool_call", "id": "ctc_" + uuid.uuid4().hex,
                    "status": "in_progress", "call_id": call_id, "name": name,
                    "input": ""}  # fmt: skip
        item = {"type": "function_call", "id": "fc_" + uuid.uuid4().hex, "status": "in_progress",
                "call_id": call_id, "name": name, "arguments": ""}  # fmt: skip
        if name in self.namespaced:
            item["namespace"], item["name"] = self.namespaced[name]
        return item

    def _block_delta(self, index: Any, delta: dict) -> list[dict]:
        state = self._blocks.get(index) if isinstance(index, int) else None
        if state is None:
            return []
        item, kind = state["item"], delta.get("type")
        position = state["position"]
        value = delta.get(DELTA_FIELDS.get(kind, ""))
        if not isinstance(value, str):
            return []
        if kind == "text_delta" and "text" in state:
            state["text"] += value
            return [self._event("response.output_text.delta", item_id=item["id"],
                                output_index=position, content_index=0, delta=value,
                                logprobs=[])]  # fmt: skip
        if kind == "thinking_delta" and "block" in state:
            state["block"]["thinking"] += value
            return [self._event("response.reasoning_summary_text.delta", item_id=item["id"],
                                output_index=position, summary_index=0, delta=value)]  # fmt: skip
        if kind == "signature_delta" and "block" in state:
            state["block"]["signature"] += value
        elif kind == "input_json_delta" and "json" in state:
            state["json"] += value
            if item["type"] == "function_call":
                return [self._event("response.function_call_arguments.delta", item_id=item["id"],
                                    output_index=position, delta=value)]  # fmt: skip
        return []

    def _block_stop(self, index: Any) -> list[dict]:
        state = self._blocks.pop(index, None) if isinstance(index, int) else None
        if state is None:
            return []
        item, position = state["item"], state["position"]
        events: list[dict] = []
        if item["type"] == "message":
            text = state["text"]
            part = {"type": "output_text", "text": text, "annotations": []}
            item["content"] = [part]
            events += [self._event("response.output_text.done", item_id=item["id"],
                                   output_index=position, content_index=0, text=text,
                                   logprobs=[]),
                       self._event("response.content_part.done", item_id=item["id"],
                                   output_index=position, content_index=0, part=part)]  # fmt: skip
        elif item["type"] == "reasoning":
            block = state["block"]
            if block.get("type") == "thinking":
                text = block["thinking"]
                item["summary"] = [{"type": "summary_text", "text": text}]
                events += [self._event("response.reasoning_summary_text.done", item_id=item["id"],
                                       output_index=position, summary_index=0, text=text),
                           self._event("response.reasoning_summary_part.done",
                                       item_id=item["id"], output_index=position,
                                       summary_index=0, part=item["summary"][0])]  # fmt: skip
            item["encrypted_content"] = reasoning_blob(block)
        else:
            events += self._call_done(item, state["json"], position)
        if "status" in item:
            item["status"] = "completed"
        events.append(self._event("response.output_item.done", output_index=position, item=item))
        return events

    def _call_done(self, item: dict, raw: str, position: int) -> list[dict]:
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except ValueError:
            arguments = None
        if item["type"] == "custom_tool_call":
            text = arguments.get(CUSTOM_INPUT) if isinstance(arguments, dict) else None
            # The model's input for a freeform tool is its one string; anything else is
            # given as the JSON it sent (the tool then says what is wrong with it).
            item["input"] = text if isinstance(text, str) else raw
            return [self._event("response.custom_tool_call_input.delta", item_id=item["id"],
                                output_index=position, delta=item["input"]),
                    self._event("response.custom_tool_call_input.done", item_id=item["id"],
                                output_index=position, input=item["input"])]  # fmt: skip
        item["arguments"] = json.dumps(arguments) if isinstance(arguments, dict) else raw
        return [self._event("response.function_call_arguments.done", item_id=item["id"],
                            output_index=position, arguments=item["arguments"])]  # fmt: skip
