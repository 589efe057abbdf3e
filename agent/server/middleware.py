"""Security headers for every response."""

from __future__ import annotations

from django.conf import settings
from django.middleware.gzip import GZipMiddleware

# No inline script or style anywhere (the page's transport, static/transport.js, needs
# neither); images only from this origin or data: URLs, so model-written markdown cannot
# exfiltrate through image URLs; the WebSocket is same-origin.
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


# The chat page's terminals: xterm.js's DOM renderer (static/vendor/xterm-6.0.0.min.js)
# writes its rules into <style> elements, which `style-src 'self'` refuses, each refusal a
# console error. These hashes allow exactly the texts it writes for this page's options
# (static/terminal.js's theme and font; its emulators numbered 1 to 4 on a page: a CLI
# conversation has two), and nothing else: no other inline style, no style attribute.
# A new xterm.js or theme changes them: tests/e2e/test_terminal.py names the missing ones.
TERMINAL_STYLE_HASHES = (
    "sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",  # an element before its text
    "sha256-hbqrMTMPEXiVRyrAquyvY19Wo6fpCmJF/PqCFRD1azs=",  # the scrollbar's colours
    # each emulator's cell rule, then its theme (colours, font, cursor, selection)
    "sha256-F0eMgzg/9KDZDnYmAjaV1/2SVRvtQav/R/mGbug/9vw=",
    "sha256-eqdJB7fmXERJyC8OBlf733Iga0qziiyBy8omsUjKN/Y=",
    "sha256-iiBTuc4tDVkG52ewxlGTQyVEIK/fF1BUXw1qnQuXHDg=",
    "sha256-nidI+4FMQAykaqW8ne0+XwLwRU8WAKLOsZl9Y2UVtEM=",
    "sha256-OCTkO1H3u3jBGUgift3sgIzbO7wMZe++FVZsGPb96Mg=",
    "sha256-z+nIlkWvqSaHxOGfX4pNZ1+vrQS/7EALu7I+otBT3vI=",
    "sha256-ksuCZPZN8+zuUSb5hI0MiKHkKiPPiFAY7A30DBdYCz4=",
    "sha256-KhT4chQjMx2GkoztY2Aml+/pLUqwvWeiIJNKgsWZaeA=",
)


def content_security_policy(terminal_styles: bool = False) -> str:
    """The policy, with the Preview panel's frames: this origin's, or the preview origin's
    when previews are served from one; on the chat page (``terminal_styles``), its
    terminals' own style texts too, by hash."""
    frames = " ".join(["'self'", settings.HARNESS_PREVIEW_ORIGIN]).strip()
    policy = CONTENT_SECURITY_POLICY
    if terminal_styles:
        hashes = " ".join(f"'{h}'" for h in TERMINAL_STYLE_HASHES)
        policy = policy.replace("style-src 'self'", f"style-src 'self' {hashes}")
    return f"{policy}; frame-src {frames}"


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
