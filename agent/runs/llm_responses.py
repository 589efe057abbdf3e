"""``/llm/openai/v1/responses`` on a CLI session's gateway socket: OpenAI's Responses API,
for Codex, translated to the deployment's Messages API upstream and back.

The same gate as ``/llm/anthropic`` (``llm_gateway.precheck``: a run going on, the body's
bound, the deployment's key; ``budget_refusal``: the owner's budget before each call), the
request translated (``core/model/openai_request``: what has no equivalent is a 400 naming it),
sent upstream streamed with the deployment's key, metered from the upstream's own figures
as it passes (``llm_metering.Meter``, as for every CLI), and its events translated into the
Responses API's (``core/model/openai_stream``). A streamed request gets them as SSE; a plain
one gets the final response object once the upstream finished. Errors come in OpenAI's
shape (``{"error": {"type", "code", "message"}}``), the upstream's status kept, so that
Codex retries what it would retry against OpenAI. Nothing is stored between calls:
``previous_response_id`` is refused (Codex sends its whole input, ``store: false``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator

import aiohttp

from agent.core.model.openai_request import Translated, Unsupported, translate
from agent.core.model.openai_stream import ResponseStream, error_body, sse
from agent.core.model.wire import SSEParser
from agent.runs.llm_gateway import Gateway, Reply, budget_refusal, post_upstream, precheck
from agent.runs.llm_metering import Meter

log = logging.getLogger(__name__)

PATH = "/v1/responses"
UPSTREAM_HEADERS = {"content-type": "application/json", "anthropic-version": "2023-06-01",
                    "accept": "text/event-stream"}  # fmt: skip
MAX_ERROR_BODY = 64 << 10  # an upstream error's body read for its message, at most this
KEPT_HEADERS = ("retry-after", "request-id")


def openai_error(status: int, kind: str, message: str,
                 headers: dict[str, str] | None = None) -> Reply:  # fmt: skip
    payload = json.dumps(error_body(kind, message)).encode()

    async def body() -> AsyncGenerator[bytes, None]:
        yield payload

    return Reply(status, {"content-type": "application/json", **(headers or {})}, body())


async def handle(gateway: Gateway, method: str, endpoint: str, body: bytes) -> Reply:
    if endpoint != PATH:
        return openai_error(404, "not_found_error", "Only /llm/openai/v1/responses is served "
                            "here.")  # fmt: skip
    refused = precheck(gateway, method, body)
    if refused is not None:
        return openai_error(*refused)
    try:
        request = json.loads(body)
        translated = translate(request)
    except ValueError as exc:  # Unsupported is one; so is a body that is not JSON
        message = str(exc) if isinstance(exc, Unsupported) else "The body is not JSON."
        return openai_error(400, "invalid_request_error", message)
    if (refused := await budget_refusal(gateway)) is not None:
        return openai_error(*refused)
    upstream_body = json.dumps(translated.body).encode()
    response = await post_upstream("/v1/messages", "", UPSTREAM_HEADERS, upstream_body)
    if isinstance(response, Reply):
        return openai_error(502, "api_error", "The model upstream is unreachable.")
    if response.status >= 300:
        return await _upstream_error(response)
    events = _translate(gateway, response, translated, upstream_body)
    if request.get("stream") is True:
        return Reply(200, {"content-type": "text/event-stream", "cache-control": "no-cache"},
                     _as_sse(events))  # fmt: skip
    return await _whole(events)


async def _upstream_error(response: aiohttp.ClientResponse) -> Reply:
    """The upstream's refusal (Anthropic's error body) in OpenAI's shape, its status kept."""
    try:
        raw = await response.content.read(MAX_ERROR_BODY)
    except (aiohttp.ClientError, TimeoutError):
        raw = b""
    finally:
        response.release()
    try:
        error = json.loads(raw).get("error")
    except (ValueError, AttributeError):
        error = None
    error = error if isinstance(error, dict) else {}
    kept = {name: response.headers[name] for name in KEPT_HEADERS if name in response.headers}
    message = str(error.get("message") or f"The model upstream answered {response.status}.")
    return openai_error(response.status, str(error.get("type") or "api_error"), message[:2000],
                        kept)  # fmt: skip


async def _translate(gateway: Gateway, response: aiohttp.ClientResponse, translated: Translated,
                     upstream_body: bytes) -> AsyncGenerator[list[dict], None]:  # fmt: skip
    """The Responses events, batch by batch, as the upstream's answer arrives; metered
    whatever happens (the CLI went away, the upstream broke off)."""
    stream = ResponseStream(translated, str(translated.body.get("model", "")))
    meter = Meter(streamed=True)
    parser = SSEParser()
    yield stream.start()
    try:
        async for chunk in response.content.iter_any():
            meter.feed(chunk)
            batch = []
            for name, data in parser.feed(chunk):
                if name == "ping" or not data:
                    continue
                try:
                    event = json.loads(data)
                except ValueError:
                    continue  # hostile or broken: skipped, as every reader of the stream does
                batch += stream.feed(name, event)
            if batch:
                yield batch
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.warning("the model upstream's answer broke off: %s", exc)
    finally:
        response.release()
        gateway.meter_answer(meter, upstream_body)
    yield stream.finish()


async def _as_sse(events: AsyncGenerator[list[dict], None]) -> AsyncGenerator[bytes, None]:
    try:
        async for batch in events:
            if batch:
                yield b"".join(sse(event) for event in batch)
    finally:
        await events.aclose()


async def _whole(events: AsyncGenerator[list[dict], None]) -> Reply:
    """A plain request: the final response object (its status says how it ended)."""
    last: dict | None = None
    async for batch in events:
        if batch:
            last = batch[-1]
    response = (last or {}).get("response") or {}
    if response.get("status") == "failed":
        error = response.get("error") or {}
        return openai_error(502, str(error.get("type", "api_error")),
                            str(error.get("message", "The model upstream failed.")))  # fmt: skip
    payload = json.dumps(response).encode()

    async def body() -> AsyncGenerator[bytes, None]:
        yield payload

    return Reply(200, {"content-type": "application/json"}, body())
