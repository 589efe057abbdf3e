"""The one check on the egress proxy's socket a request to the broker brings: the server
opens its socket (``O_PATH``) and sends the descriptor, so the broker is given no path,
and binds into the sandbox only a Unix socket the server owns; never a directory, a file,
or a socket of another user's."""

from __future__ import annotations

import os
import stat


class Refused(Exception):
    pass


def checked(fds: list[int], service_uid: int) -> int | None:
    """The socket's descriptor among ``fds`` (None: the request brought none)."""
    if not fds:
        return None
    if len(fds) != 1:
        raise Refused("at most one descriptor: the egress proxy's socket")
    st = os.fstat(fds[0])
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != service_uid:
        raise Refused("the descriptor is not the server's egress socket")
    return fds[0]
