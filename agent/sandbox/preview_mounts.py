"""Where a terminal's sandbox holds the preview forwarder (agent/sandbox/preview_forwarder.py)
and the directory of its socket, and how the shell's start runs it: in a session of its
own (``setsid -f``), its input and output away from the shell's terminal, before the
shell's own start, which stays as it was. It dies with the sandbox (its pid namespace)."""

from __future__ import annotations

import os

IN_SANDBOX = "/harness-preview"
SOCKET_NAME = "s"
FORWARDER = os.path.realpath(os.path.join(os.path.dirname(__file__), "preview_forwarder.py"))
START = (
    f"setsid -f /usr/bin/python3 -I -S {IN_SANDBOX}/forwarder.py "
    f"{IN_SANDBOX}/socket/{SOCKET_NAME} </dev/null >/dev/null 2>&1; "
)


def binds(directory: list[str]) -> list[str]:
    """bwrap arguments; ``directory``: how the socket's directory is bound (``--bind-fd
    FD`` under a broker, ``--bind PATH`` otherwise), at its place."""
    return ["--perms", "0755", "--dir", IN_SANDBOX,
            "--ro-bind", FORWARDER, f"{IN_SANDBOX}/forwarder.py",
            *directory, f"{IN_SANDBOX}/socket"]  # fmt: skip
