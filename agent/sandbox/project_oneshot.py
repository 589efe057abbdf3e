"""A one-shot sandbox's program (agent/sandbox/projects.py): one project operation, asked
as JSON on standard input; its JSON answer on the first line of standard output, the
bytes (an archive) after it."""

from __future__ import annotations

import json
import sys

from agent.core.projects import MOUNT
from agent.core.projects import ops as project_ops
from agent.sandbox.ops import error_header


def main() -> None:
    out = sys.stdout.buffer
    blob = b""
    try:
        request = json.loads(sys.stdin.buffer.read(1 << 20))
        result, blob = project_ops.run(MOUNT, request["name"], request["args"])
        header = {"ok": True, "result": result}
    except Exception as exc:  # noqa: BLE001 - told to the server, which raises it
        header = {"ok": False, **error_header(exc)}
    out.write(json.dumps(header).encode() + b"\n")
    out.write(blob)
    out.flush()
