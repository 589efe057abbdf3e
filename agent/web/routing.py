from django.urls import path

from agent.web.consumers import ConversationConsumer

websocket_urlpatterns = [
    path("ws/c/<uuid:conversation_id>/", ConversationConsumer.as_asgi()),
]
