"""A Terminal panel's tmux pane: ``python -m agent.sandbox.terminal_attach SOCKET TICKET``
under a broker, or ``python -m agent.sandbox.terminal_attach --local -- ARGV…`` on a
server that is not root (ARGV: the sandbox's bwrap command line). Run by tmux, as the
service user.

The shell gets a terminal of its own: a pseudo-terminal made here, whose other end this
process copies to and from the pane's. The sandbox starts in a session of its own
(bwrap's ``--new-session``: no way to push keys into a terminal outside it), so the pane's
terminal could never be the shell's controlling terminal; this one can (``setsid -c``
inside the sandbox), which gives the shell job control, Ctrl-C and window-size changes.
The pane's terminal is put in raw mode: every key reaches the shell as typed, none
signals this process.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import signal
import socket
import subprocess
import sys
import termios
import threading
import tty

from agent.sandbox.signal_defaults import default_signals
from agent.sandbox.wire import WireError, recv_packet, send_packet

# What the sandbox runs (``bash -c`` of it): a session whose controlling terminal is the
# pseudo-terminal it was given, and in it an interactive shell with our prompt (set here:
# a non-interactive bash drops PS1 from its environment) and no rc file
# (/etc/bash.bashrc's would name a user the sandbox has no entry for).
PROMPT = r"\w \$ "
PROGRAM = f"exec setsid -w -c env {shlex.quote('PS1=' + PROMPT)} /bin/bash --norc -i"


def copy_size(source: int, target: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.ioctl(target, termios.TIOCSWINSZ, fcntl.ioctl(source, termios.TIOCGWINSZ, b"\0" * 8))


def pump(source: int, target: int) -> None:
    with contextlib.suppress(OSError):
        while data := os.read(source, 65536):
            while data:
                data = data[os.write(target, data) :]


def start_by_ticket(socket_path: str, ticket: str, child_end: int):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.connect(socket_path)
    send_packet(conn, {"ticket": ticket}, [child_end, child_end, child_end])
    reply, _ = recv_packet(conn)
    if not reply.get("ok"):
        raise OSError(f"the sandbox was refused: {reply.get('error')}")

    def wait() -> int:
        try:
            ended, _ = recv_packet(conn)
        except (OSError, WireError):
            ended = {}
        code = ended.get("exit")
        return code if isinstance(code, int) and 0 <= code < 256 else 1

    return wait


def start_local(argv: list[str], child_end: int):
    child = subprocess.Popen(argv, stdin=child_end, stdout=child_end, stderr=child_end,
                             preexec_fn=default_signals)  # fmt: skip
    return child.wait


def main(argv: list[str]) -> int:
    master, child_end = os.openpty()
    copy_size(0, master)
    signal.signal(signal.SIGWINCH, lambda *_: copy_size(0, master))
    try:
        if argv[:2] == ["--local", "--"]:
            wait = start_local(argv[2:], child_end)
        else:
            wait = start_by_ticket(argv[0], argv[1], child_end)
    except (OSError, WireError, IndexError) as exc:
        print(f"harness: the terminal could not start ({exc})", file=sys.stderr)
        return 1
    finally:
        os.close(child_end)
    saved = None
    with contextlib.suppress(termios.error):
        saved = termios.tcgetattr(0)
        tty.setraw(0)
    threading.Thread(target=pump, args=(0, master), daemon=True).start()
    output = threading.Thread(target=pump, args=(master, 1))
    output.start()
    try:
        return wait()
    finally:
        output.join(5)
        if saved is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(0, termios.TCSADRAIN, saved)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
