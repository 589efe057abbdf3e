"""Compaction: when the history nears the model's context window,
the model summarises the older exchanges and later calls send the summary in their place.

Nothing is dropped silently: the event log keeps every event, the ``compaction`` event
records the summary and what it replaced, and when even the summary cannot make a request
fit, the run ends with a clear error. The cut is made only where no tool_use is separated
from its tool_result: before an assistant message (the summary becomes the user message
before it) or before a prompt (the summary joins it).
"""

from __future__ import annotations

import json
from typing import Any

from agent.core import images

Message = dict[str, Any]

SUMMARY_PREFIX = (
    "[The earlier part of this conversation was compacted to fit the context window. "
    "Summary of it:]\n\n"
)
INSTRUCTIONS = (
    "Summarise the conversation above for yourself, so that you can continue the work "
    "without it: the user's goals and constraints, decisions made, files read and changed "
    "(with paths), commands run and their outcomes, errors met, and what is still open. Be "
    "concise and specific; keep exact names, paths, numbers and error messages. Answer with "
    "the summary only."
)
SUMMARY_MAX_TOKENS = 2048
KEEP_SHARE = 0.25  # of the context window: the recent messages kept as they are
CHARS_PER_TOKEN = 3.5  # an estimate before the API has counted (code and JSON run dense)


def _chars(message: Message) -> int:
    # An attached image is a short reference here and ~1,600 tokens in the request.
    return (
        len(json.dumps(message, ensure_ascii=False)) + images.count(message) * images.ESTIMATE_CHARS
    )


def size(messages: list[Message]) -> int:
    """Characters of the messages as sent (the basis of the token estimate)."""
    return sum(_chars(m) for m in messages)


# The loop's mark on the last message of a model call's input: the input tokens the API
# counted for it. Stored with the history, so the next prompt (another run, another process)
# starts from the measured count rather than a guess from characters.
MEASURED = "_tokens"


def measured(messages: list[Message]) -> tuple[int, int] | None:
    """The last measured input: (its tokens, the characters of the messages it was made
    of), from the newest mark; None when no call has been measured since the last
    compaction."""
    for index in range(len(messages) - 1, -1, -1):
        tokens = messages[index].get(MEASURED)
        if isinstance(tokens, int) and tokens > 0:
            return tokens, size(for_request(messages[: index + 1]))
    return None


def for_request(messages: list[Message]) -> list[Message]:
    """The messages as the API takes them: without the loop's own keys (``_seq``)."""
    return [
        {k: v for k, v in m.items() if not k.startswith("_")} if any(k[0] == "_" for k in m) else m
        for m in messages
    ]


def _is_cut_point(messages: list[Message], index: int) -> bool:
    message = messages[index]
    if message["role"] == "assistant":
        return True
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    return not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks)


def cut_point(messages: list[Message], keep_chars: int, keep_exchanges: int = 0) -> int | None:
    """Where to cut: the earliest point from which the rest fits in ``keep_chars``, or else
    the latest point (the least kept). With ``keep_exchanges`` (a compaction asked for):
    just before the last that many exchanges (a prompt and what answered it). None when
    there is nothing to summarise."""
    points = [i for i in range(1, len(messages)) if _is_cut_point(messages, i)]
    if keep_exchanges:
        starts = [i for i in points if messages[i]["role"] == "user"]
        return starts[-keep_exchanges] if len(starts) >= keep_exchanges else None
    if not points:
        return None
    kept = 0
    sizes = [_chars(m) for m in messages]
    suffix = [0] * (len(messages) + 1)
    for i in range(len(messages) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + sizes[i]
    for point in points:
        kept = suffix[point]
        if kept <= keep_chars:
            return point
    return points[-1]


def through_seq(messages: list[Message]) -> int:
    """The newest event seq the summarised messages came from (0: not known)."""
    return max((m.get("_seq", 0) for m in messages), default=0)


def summary_messages(older: list[Message]) -> list[Message]:
    """The request's messages: the older part (its images named, not sent again), then the
    instruction (as the last user turn)."""
    messages = images.as_text(for_request(older))
    instruction = {"type": "text", "text": INSTRUCTIONS}
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "user":
        content = last["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        return [*messages[:-1], {"role": "user", "content": [*blocks, instruction]}]
    return [*messages, {"role": "user", "content": [instruction]}]


def compacted(messages: list[Message], cut: int, summary: str) -> list[Message]:
    """The history from the cut on, after a user message holding the summary."""
    note = {"type": "text", "text": SUMMARY_PREFIX + summary.strip()}
    # A mark measured an input that held what is now summarised: no longer true.
    kept = [{k: v for k, v in m.items() if k != MEASURED} for m in messages[cut:]]
    first, rest = kept[0], kept[1:]
    if first["role"] == "user":  # a prompt: the summary goes before it, in one message
        content = first["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        head = {**first, "content": [note, *blocks]}
        return [head, *rest]
    return [{"role": "user", "content": [note]}, first, *rest]
