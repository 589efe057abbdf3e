"""A CLI agent's tmux pane under a broker: ``python -m agent.sandbox.attach SOCKET TICKET
LOG [AGENT]``, run by tmux as the service user.

It hands the broker its ticket and the pane's terminal; the broker starts the CLI's sandbox
on that terminal, as the user. The CLI's standard output comes back through a pipe opened
here, is appended to LOG, the structured channel the server reads (a process in the
sandbox that writes to the terminal writes to the screen, not the log), and is shown on
the terminal as a person reads it (agent/core/cli_agents/pane_view.py: AGENT's JSON
drawn as text, not the JSON itself). LOG is capped: past ``MAX_LOG`` bytes the rest is
dropped, and the log says so.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

from agent.core.cli_agents.pane_view import PaneView
from agent.sandbox.wire import WireError, recv_packet, send_packet

MAX_LOG = 64 << 20
CAPPED = '{"type":"harness_output_capped"}\n'
NOTICE = b"\r\n[harness: the output passed its cap; the rest is not kept]\r\n"
MAX_LINE = 4 << 20  # a longer line is not drawn (the log keeps it, up to its cap)


class Screen:
    """The pane's screen: the CLI's output as is, or through a ``PaneView``, line by line."""

    def __init__(self, view: PaneView | None) -> None:
        self.view, self.partial = view, b""

    def show(self, chunk: bytes) -> None:
        if self.view is None:
            os.write(1, chunk)
            return
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        if len(self.partial) > MAX_LINE:
            self.partial = b""
        for line in lines:
            drawn = self.view.line(line.rstrip(b"\r").decode(errors="replace"))
            if drawn:
                os.write(1, drawn.encode())


def copy(read_fd: int, log_path: str, cap: int = MAX_LOG, view: PaneView | None = None) -> None:
    written = 0
    screen = Screen(view)
    with open(log_path, "ab", buffering=0) as log:
        while chunk := os.read(read_fd, 65536):
            screen.show(chunk)
            if written < cap:
                keep = chunk[: cap - written]
                log.write(keep)
                written += len(keep)
                if written >= cap:
                    log.write(b"\n" + CAPPED.encode())
                    os.write(
                        2, b"\r\n[harness: the output passed its cap; the rest is not kept]\r\n"
                    )
    os.close(read_fd)


def main(argv: list[str]) -> int:
    socket_path, ticket, log_path = argv[:3]
    view = PaneView(argv[3]) if len(argv) > 3 else None
    read_fd, write_fd = os.pipe()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(socket_path)
        send_packet(conn, {"ticket": ticket}, [0, write_fd, 2])
        os.close(write_fd)
        reply, _ = recv_packet(conn)
    except (OSError, WireError) as exc:
        print(f"harness: the sandbox could not be reached ({exc})", file=sys.stderr)
        return 1
    if not reply.get("ok"):
        print(f"harness: the sandbox was refused: {reply.get('error')}", file=sys.stderr)
        return 1
    copier = threading.Thread(target=copy, args=(read_fd, log_path, MAX_LOG, view))
    copier.start()
    try:
        ended, _ = recv_packet(conn)
    except (OSError, WireError):
        ended = {}
    copier.join()
    code = ended.get("exit")
    return code if isinstance(code, int) and 0 <= code < 256 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
