"""What a user's processes start with, whoever starts them (the broker's spawn,
agent/sandbox/spawn.py; a Terminal pane's own sandbox, agent/sandbox/terminal_attach.py).
Kept apart from spawn.py so that a pane's process need not import the tools to use it."""

from __future__ import annotations

import signal


def default_signals() -> None:
    """Ctrl-C and Ctrl-\\ doing what they do, whatever the server inherited: started in the
    background by a shell, it ignores SIGINT and SIGQUIT, and an ignored signal stays ignored
    across exec (a terminal's Ctrl-C would stop nothing)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
