"""``/llm/anthropic/…`` on the server itself: the model gateway's HTTP face (interfaces §14).

CLI agents reach the gateway through their session's socket (``agent/runs/llm_gateway``);
this answers the same calls over the server's own port for the credentials of this
process's sessions, with the same checks: anything else is 401, outside a run 403.
"""

from __future__ import annotations

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from agent.runs.llm_gateway import credential_of, error_reply, gateway_for, handle


@csrf_exempt  # no cookie is involved: the credential is the request's own header
async def anthropic(request: HttpRequest, rest: str = "") -> StreamingHttpResponse:
    try:
        body = request.body
    except RequestDataTooBig:
        reply = error_reply(413, "request_too_large", "The request is too large.")
    else:
        gateway = gateway_for(credential_of(request.headers))
        reply = await handle(gateway, request.method, request.get_full_path(),
                             request.headers, body)  # fmt: skip
    return StreamingHttpResponse(reply.body, status=reply.status, headers=reply.headers)
