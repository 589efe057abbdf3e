"""The session of a WebSocket, without Channels' wrapper around every frame it sends.

Channels' ``SessionMiddleware`` wraps the connection's ``send`` so that a modified session
is saved with an HTTP response. A socket sends no HTTP response, yet the wrapper read the
session (a lazy object) on every frame: 5% of the server's event loop at 100 streaming
sessions. Here the session is resolved the same way (``InstanceSessionWrapper``) and the
application gets the server's own ``send``. Nothing on a socket writes to the session.
"""

from __future__ import annotations

from channels.auth import AuthMiddleware
from channels.sessions import CookieMiddleware, InstanceSessionWrapper


class SocketSessionMiddleware:
    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        wrapper = InstanceSessionWrapper(scope, send)
        await wrapper.resolve_session()
        return await self.inner(wrapper.scope, receive, send)


def socket_auth_stack(inner):
    """Channels' ``AuthMiddlewareStack`` for sockets: cookies, the session, the user."""
    return CookieMiddleware(SocketSessionMiddleware(AuthMiddleware(inner)))
