"""The tokens of one Messages API answer, read as it passes through the gateway.

A streamed answer reports its usage in ``message_start`` (input, cache, the first output
count) and ``message_delta`` (running totals); a plain one in its ``usage``. Hostile or
broken input (the stream is the upstream's, the request the CLI's) never raises: what
cannot be read is not counted, and memory stays bounded whatever arrives.
"""

from __future__ import annotations

import json
from typing import Any

from agent.core.events import USAGE_FIELDS

MAX_LINE = 1 << 20  # usage lines are small; a longer partial line is a text delta: dropped
MAX_PLAIN = 16 << 20  # a non-streamed answer is read for its usage up to this size
WANTED = (b'"message_start"', b'"message_delta"')


class Meter:
    def __init__(self, streamed: bool) -> None:
        self.streamed = streamed
        self.model = ""
        self._usage: dict[str, int] = {}
        self._partial = bytearray()
        self._dropping = False  # inside an overlong line: its rest is skipped too
        self._plain = bytearray()
        self._plain_overflow = False

    def feed(self, chunk: bytes) -> None:
        if not self.streamed:
            if self._plain_overflow or len(self._plain) + len(chunk) > MAX_PLAIN:
                self._plain_overflow, self._plain = True, bytearray()
            else:
                self._plain += chunk
            return
        *lines, rest = chunk.split(b"\n")
        for line in lines:
            self._partial += line
            self._line(bytes(self._partial))
            self._partial.clear()
            self._dropping = False
        if self._dropping or len(self._partial) + len(rest) > MAX_LINE:
            self._partial.clear()  # a text delta this long carries no usage: skip it
            self._dropping = True
        else:
            self._partial += rest

    def _line(self, line: bytes) -> None:
        if not self._dropping and line.startswith(b"data:") and any(w in line for w in WANTED):
            self._event(_json(line[5:]))

    def _event(self, event: Any) -> None:
        if not isinstance(event, dict):
            return
        if event.get("type") == "message_start" and isinstance(event.get("message"), dict):
            message = event["message"]
            if isinstance(message.get("model"), str):
                self.model = message["model"]
            self._take(message.get("usage"))
        elif event.get("type") == "message_delta":
            self._take(event.get("usage"))

    def _take(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        for name in USAGE_FIELDS:
            value = usage.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                self._usage[name] = value  # running totals: the latest is the answer's

    def counts(self) -> dict[str, int] | None:
        """The answer's token counts, or None when it reported none (an error, say)."""
        if not self.streamed and not self._plain_overflow:
            answer = _json(bytes(self._plain))
            if isinstance(answer, dict):
                if isinstance(answer.get("model"), str):
                    self.model = answer["model"]
                self._take(answer.get("usage"))
        if not self._usage:
            return None
        return {name: self._usage.get(name, 0) for name in USAGE_FIELDS}


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None
