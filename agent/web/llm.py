"""``/llm/anthropic/…`` and ``/llm/openai/…`` on the server itself (docs/API.md,
"/llm/anthropic").

A CLI agent reaches the model gateway only through its own session's socket, bound into its
sandbox (``agent/runs/llm_gateway``): that socket is its credential, so no key a sandboxed
process or a collaborator could copy is accepted here. Every call is refused, saying so.
"""

from __future__ import annotations

from django.http import HttpRequest, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from agent.runs.llm_gateway import error_reply
from agent.runs.llm_responses import openai_error

REFUSAL = (
    "CLI agents reach the model through their sandbox's gateway socket only; no key "
    "is accepted here."
)


@csrf_exempt  # no cookie is involved, and nothing is done
async def anthropic(request: HttpRequest, rest: str = "") -> StreamingHttpResponse:
    reply = error_reply(401, "authentication_error", REFUSAL)
    return StreamingHttpResponse(reply.body, status=reply.status, headers=reply.headers)


@csrf_exempt  # as above: Codex's Responses API, refused in OpenAI's error shape
async def openai(request: HttpRequest, rest: str = "") -> StreamingHttpResponse:
    reply = openai_error(401, "authentication_error", REFUSAL)
    return StreamingHttpResponse(reply.body, status=reply.status, headers=reply.headers)
