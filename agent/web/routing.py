from django.urls import path

from agent.web.consumers import Admission, ConversationConsumer
from agent.web.preview_socket import PreviewSocket

websocket_urlpatterns = [
    path("ws/c/<uuid:conversation_id>/", Admission(ConversationConsumer.as_asgi())),
]


def with_previews(application):
    """The WebSocket application: a preview's sockets (agent/web/preview_socket.py: no
    session, no same-origin check, as a sandboxed page's origin is opaque; the signed
    address is their credential) and everything else by ``application``."""
    preview = PreviewSocket.as_asgi()

    async def route(scope, receive, send):
        if scope["path"].startswith("/preview/"):
            return await preview(scope, receive, send)
        return await application(scope, receive, send)

    return route
