"""How many live connections each user holds in this process, and the bound on them.

A page's WebSocket and an API event stream (SSE) each hold a socket, a task and channel
layer state for as long as they are open: one user opening a thousand of them would use up
the server's file descriptors, and every other user's requests would fail. A user (signed
in, or by API token: the count is the user's, not the credential's) may hold at most
``HARNESS_SOCKETS_PER_USER`` of them at once in this process; one more is refused, and the
ones already open are not touched.

One job: count. ``take`` checks and counts in one step, under a lock, so that connections
opened at the same moment cannot all pass a bound that only some of them fit in (a test
opens N + 1 concurrently). The ``Slot`` it returns is given back with ``release``, which
counts once however often (and from however many exit paths) it is called; a user whose
count falls to zero leaves no entry behind.
"""

from __future__ import annotations

import threading

from django.conf import settings


class Slot:
    """One counted connection of one user; ``release`` (or leaving a ``with``) gives it
    back, once."""

    __slots__ = ("_counter", "_released", "user_id")

    def __init__(self, counter: UserConnections, user_id: int):
        self._counter, self.user_id, self._released = counter, user_id, False

    def release(self) -> None:
        with self._counter._lock:
            if self._released:
                return
            self._released = True
            self._counter._drop(self.user_id)

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()


class UserConnections:
    def __init__(self):
        self._held: dict[int, int] = {}
        self._lock = threading.Lock()  # views may count from worker threads too

    @staticmethod
    def limit() -> int:
        return settings.HARNESS_SOCKETS_PER_USER

    def take(self, user_id: int) -> Slot | None:
        """A slot for one more connection of the user, or None when they hold the limit."""
        with self._lock:
            held = self._held.get(user_id, 0)
            if held >= self.limit():
                return None
            self._held[user_id] = held + 1
            return Slot(self, user_id)

    def held(self, user_id: int) -> int:
        with self._lock:
            return self._held.get(user_id, 0)

    def _drop(self, user_id: int) -> None:  # under the lock
        held = self._held.get(user_id, 0) - 1
        if held > 0:
            self._held[user_id] = held
        else:
            self._held.pop(user_id, None)


# This process's count: every WebSocket (agent/web/consumers.py) and event stream
# (agent/web/api_events.py) of every user.
connections = UserConnections()

REFUSED_MESSAGE = (
    "Too many open connections: you may have {limit} live pages and event streams open at "
    "once. Close some tabs or streams and try again."
)


def refused_message() -> str:
    return REFUSED_MESSAGE.format(limit=UserConnections.limit())
