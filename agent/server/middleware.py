"""Security headers for every response."""

from __future__ import annotations

from django.conf import settings
from django.middleware.gzip import GZipMiddleware

# No inline script or style anywhere (htmx is configured not to need them); images only
# from this origin or data: URLs, so model-written markdown cannot exfiltrate through
# image URLs; the WebSocket is same-origin.
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "font-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])  # fmt: skip


def content_security_policy() -> str:
    """The policy, with the Preview panel's frames: this origin's, or the preview origin's
    when previews are served from one."""
    frames = " ".join(["'self'", settings.HARNESS_PREVIEW_ORIGIN]).strip()
    return f"{CONTENT_SECURITY_POLICY}; frame-src {frames}"


class SecurityHeadersMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.setdefault("Content-Security-Policy", content_security_policy())
        response.setdefault("Referrer-Policy", "same-origin")
        response.setdefault("Permissions-Policy", "camera=(), microphone=(), geolocation=()")
        return response


class CompressionMiddleware(GZipMiddleware):
    """gzip for pages and JSON (Django's middleware, which pads its output against BREACH),
    never for event streams: each SSE event must reach the client when it is written."""

    def process_response(self, request, response):
        if response.get("Content-Type", "").startswith("text/event-stream"):
            return response
        return super().process_response(request, response)
