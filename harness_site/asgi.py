"""ASGI entry point: Daphne serves HTTP through Django and WebSockets through Channels."""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")
django_asgi_app = get_asgi_application()

# Started as root: the broker keeps root, this process becomes the service user before it
# serves (or starts a thread).
from agent.sandbox import drop  # noqa: E402

drop.start()

from channels.auth import AuthMiddlewareStack  # noqa: E402 - needs Django set up
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from agent.runs import selftest  # noqa: E402
from agent.server.body_limit import BodyLimit  # noqa: E402
from agent.server.origin import SameOriginValidator  # noqa: E402
from agent.web.routing import websocket_urlpatterns, with_previews  # noqa: E402

# Allocations between two collections of the youngest generation (Python's default: 700).
GC_YOUNG_THRESHOLD = 10_000

application = ProtocolTypeRouter(
    {
        # Static files come through Django too (WhiteNoise's middleware: settings.py).
        "http": BodyLimit(django_asgi_app),
        # The page's whole origin (scheme, host, port) must be this server's
        # (agent/server/origin.py): host names alone let another port or scheme in.
        # Previews' sockets are authorised by their signed address (agent/web/routing.py).
        "websocket": with_previews(
            SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        ),
    }
)

# One sandboxed command, in the background: its result is logged and /healthz reports it.
selftest.start()

# The server's long-lived objects (Django, the SDK and its models, templates, the code) go
# out of the cyclic collector's way: otherwise each full collection walks all of them while
# every socket waits. The longest one in a benchmark server's life (250 streaming
# sessions) took 88-111 ms before and 17-36 ms after. The SDK is imported now for that
# reason (and so the first prompt does not pay for the import).
# (The agent's own modules came in with the routing above.)
import anthropic  # noqa: E402, F401

gc.collect()
gc.freeze()
# The young generations are collected less often too: a streaming server allocates many
# short-lived objects per delta (frames, dicts, strings) that reference counting frees;
# the default threshold (700) ran a collection every few frames for nothing to find.
gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)
