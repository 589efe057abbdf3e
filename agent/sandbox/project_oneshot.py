"""The program of a project operation's sandbox (agent/sandbox/projects.py): ``main``
answers one operation, asked as JSON on standard input (its JSON answer on the first
line of standard output, the bytes of an archive after it); ``serve`` answers one after
another on a socket (``wire`` frames), for the file host's worker of one scope
(agent/sandbox/project_workers.py)."""

from __future__ import annotations

import json
import socket
import sys

from agent.core.projects import MOUNT
from agent.core.projects import ops as project_ops
from agent.sandbox.ops import error_header
from agent.sandbox.wire import WireError, read_frame, write_frame


def answer(request) -> tuple[dict, bytes]:
    try:
        result, blob = project_ops.run(MOUNT, request["name"], request["args"])
        return {"ok": True, "result": result}, blob
    except Exception as exc:  # noqa: BLE001 - told to the caller, which raises it
        return {"ok": False, **error_header(exc)}, b""


def main() -> None:
    out = sys.stdout.buffer
    header, blob = answer(json.loads(sys.stdin.buffer.read(1 << 20)))
    out.write(json.dumps(header).encode() + b"\n")
    out.write(blob)
    out.flush()


def serve(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    while True:
        try:
            request, _ = read_frame(sock)
        except (WireError, OSError):
            return  # the host went away, or let this worker go
        write_frame(sock, *answer(request))
