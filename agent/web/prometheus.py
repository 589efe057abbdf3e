"""``/metrics``: this process's metrics (agent/server/metrics.py) for a Prometheus scrape,
for the holder of ``HARNESS_METRICS_TOKEN`` only.

A bearer token rather than a staff session: a scraper has no session, and it scrapes each
Daphne process on its own port (plain HTTP, ``Host: 127.0.0.1``), which is why the probe
middleware answers this path ahead of the host check and the HTTPS redirect, as it does
``/healthz``. Without a configured token the path does not exist (404).
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_safe

from agent.server import metrics as registry

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    token = settings.HARNESS_METRICS_TOKEN
    if not token:
        raise Http404
    given = request.headers.get("Authorization", "").removeprefix("Bearer ")
    if not hmac.compare_digest(given.encode(), token.encode()):
        response = HttpResponse("a bearer token is required\n", status=401,
                                content_type="text/plain")  # fmt: skip
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(registry.render(), content_type=CONTENT_TYPE)
