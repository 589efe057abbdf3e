from django.urls import path

from agent.web.consumers import Admission, ConversationConsumer

websocket_urlpatterns = [
    path("ws/c/<uuid:conversation_id>/", Admission(ConversationConsumer.as_asgi())),
]
