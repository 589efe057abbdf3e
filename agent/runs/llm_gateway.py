"""The deployment's model endpoint for CLI agents: ``/llm/anthropic``.

A CLI runs in the user's sandbox with no network and must never see the deployment's key.
Its session gets a private Unix socket served here, bound into that sandbox alone, and a
forwarder inside the sandbox (``llm_forwarder.js``) listening on the sandbox's own
loopback: the CLI's ``ANTHROPIC_BASE_URL`` is ``http://127.0.0.1:PORT/llm/anthropic``.

The socket is the credential: nothing secret is in the CLI's environment, arguments or
files (its ``ANTHROPIC_API_KEY`` is a placeholder the gateway ignores), so nothing a
sandboxed process or a collaborator reads can be replayed from elsewhere. A call is
answered only while a run of the conversation is going on (between prompts, a process the
CLI left behind gets nothing), and the socket goes with the session.

Each call is forwarded to the deployment's upstream with the deployment's key, the answer
streamed back unchanged, and its tokens metered from the upstream's own figures (never the
CLI's report) into the run as ``usage`` events: the conversation's record and its owner's
budget. A call that costs is forwarded only if the run's guard allows it (the owner's
budget: agent/runs/spend.py); refused, the CLI gets a 403 naming the budget. The server's
own ``/llm/anthropic/…`` (``views``) answers nobody: it says where a CLI's calls go.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import tempfile
import weakref
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web
from django.conf import settings

from agent.core.events import UsageEvent
from agent.core.loop import CallRefused, Guard
from agent.core.pricing import cost_usd
from agent.runs.llm_metering import Meter
from agent.runs.workspaces import sandbox_ids
from agent.sandbox import drop

log = logging.getLogger(__name__)

PREFIX = "/llm/anthropic"
OPENAI_PREFIX = "/llm/openai"  # the Responses API, for Codex (llm_responses.py)
# What a CLI may call: messages (streamed or not) and token counting; nothing else of the
# upstream's API (no files, no batches, no admin) is reachable through the deployment.
PATHS = ("/v1/messages", "/v1/messages/count_tokens")
MAX_BODY = 32 << 20  # a long conversation with images; more is refused (413)
PORT_IN_SANDBOX = 47011  # on the sandbox's own loopback (its network namespace is private)
DIR_IN_SANDBOX = "/harness-llm"
FORWARDER = Path(__file__).with_name("llm_forwarder.js")
DEFAULT_UPSTREAM = "https://api.anthropic.com"
# Request headers a CLI may pass upstream; its own credentials are never among them.
REQUEST_HEADERS = ("content-type", "accept", "anthropic-version", "anthropic-beta")
RESPONSE_HEADERS = ("content-type", "request-id", "retry-after", "x-should-retry",
                    "anthropic-ratelimit-requests-remaining")  # fmt: skip
UPSTREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=30, sock_read=600)

# What a CLI presents as its key: not a secret (the socket it reaches is what counts).
PLACEHOLDER_KEY = "harness-sandbox"


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: AsyncGenerator[bytes, None]


def error_reply(status: int, kind: str, message: str) -> Reply:
    """An answer in the Anthropic API's error shape (what a CLI knows how to show)."""
    payload = json.dumps({"type": "error", "error": {"type": kind, "message": message}})

    async def body() -> AsyncGenerator[bytes, None]:
        yield payload.encode()

    return Reply(status, {"content-type": "application/json"}, body())


def refused_reply(path: str, status: int, kind: str, message: str) -> Reply:
    """A refusal in the shape of the API the call spoke (OpenAI's under /llm/openai)."""
    if path.startswith(OPENAI_PREFIX + "/"):
        from agent.runs.llm_responses import openai_error

        return openai_error(status, kind, message)
    return error_reply(status, kind, message)


@dataclass
class Gateway:
    """One CLI session's way to the model: its socket, its credential, its current run."""

    conversation_id: str
    owner_id: int
    meters = True  # usage comes from here, not from the CLI's report
    _directory: str = ""
    _runner: web.AppRunner | None = None
    _on_usage: Callable[[UsageEvent], None] | None = None
    _run_id: str | None = None
    _guard: Guard | None = None

    @property
    def env(self) -> dict[str, str]:
        return {
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{PORT_IN_SANDBOX}{PREFIX}",
            "ANTHROPIC_API_KEY": PLACEHOLDER_KEY,
        }

    @property
    def socket_path(self) -> str:
        return os.path.join(self._directory, "s")

    def bwrap_args(self) -> list[str]:
        return ["--perms", "0755", "--dir", DIR_IN_SANDBOX,
                "--ro-bind", self._directory, f"{DIR_IN_SANDBOX}/socket",
                "--ro-bind", str(FORWARDER), f"{DIR_IN_SANDBOX}/forwarder.js"]  # fmt: skip

    def wrap_command(self, argv: list[str]) -> list[str]:
        """The CLI started by the forwarder once it listens (no call can come too early)."""
        return ["node", f"{DIR_IN_SANDBOX}/forwarder.js", f"{DIR_IN_SANDBOX}/socket/s",
                str(PORT_IN_SANDBOX), *argv]  # fmt: skip

    def begin_run(self, run_id: str, on_usage: Callable[[UsageEvent], None] | None = None, *,
                  guard: Guard | None):  # fmt: skip
        """``guard``: awaited before each call that costs (None, said explicitly: free)."""
        self._run_id, self._on_usage, self._guard = run_id, on_usage, guard

    def end_run(self) -> None:
        self._run_id, self._on_usage, self._guard = None, None, None

    async def refusal(self) -> str | None:
        """Why the run may not make a model call now (its owner's budget is spent)."""
        if self._guard is None:
            return None
        try:
            await self._guard()
        except CallRefused as refused:
            return refused.message
        return None

    @property
    def running(self) -> bool:
        return self._run_id is not None

    async def serve(self) -> None:
        self._directory = tempfile.mkdtemp(prefix="harness-llm-")  # short: a socket path
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self._handle_socket)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        path = os.path.join(self._directory, "s")
        await web.UnixSite(self._runner, path).start()
        ids = sandbox_ids(self.owner_id)
        if ids is not None:  # the sandbox's user connects to it; nobody else can
            os.chown(self._directory, *ids)
            os.chown(path, *ids)
            os.chmod(path, 0o600)
        else:
            # Under a broker the socket itself goes into the user's sandbox (bound by
            # descriptor); its directory stays closed to everyone else.
            os.chmod(path, 0o666 if drop.broker() is not None else 0o600)

    async def close(self) -> None:
        self.end_run()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._directory:
            await asyncio.to_thread(shutil.rmtree, self._directory, True)

    async def _handle_socket(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            reply = refused_reply(request.path, 413, "request_too_large",
                                  "The request is too large.")  # fmt: skip
        else:
            reply = await handle(self, request.method, request.path_qs, request.headers, body)
        response = web.StreamResponse(status=reply.status, headers=reply.headers)
        try:
            await response.prepare(request)
            async for chunk in reply.body:
                await response.write(chunk)
            await response.write_eof()
        finally:  # the CLI went away mid-answer: the upstream's answer is released, metered
            await reply.body.aclose()
        return response

    def meter_answer(self, meter: Meter, body: bytes) -> None:
        """The answer's usage into the run (the conversation's log and the owner's days).
        The model is the answer's own; only an answer that names none has the request's
        (possibly megabytes of JSON) read for it."""
        counts = meter.counts()
        if counts is None or self._on_usage is None:
            return
        model = meter.model or _model_of(body)
        context = sum(counts[n] for n in counts if n != "output_tokens")
        usage = UsageEvent(**counts, cost_usd=cost_usd(model, **counts), context_tokens=context)
        try:
            self._on_usage(usage)
        except Exception:
            log.exception("metering a CLI agent's model call failed")


async def open_gateway(conversation_id: str, owner_id: int) -> Gateway:
    gateway = Gateway(str(conversation_id), int(owner_id))
    await gateway.serve()
    return gateway


async def handle(gateway: Gateway, method: str, path_qs: str, headers, body: bytes):
    """One call of a CLI, over its session's socket: checked, forwarded upstream, its
    answer metered as it passes. ``/llm/openai/…``: the Responses API, translated
    (``llm_responses``)."""
    path, _, query = path_qs.partition("?")
    if path.startswith(OPENAI_PREFIX + "/"):
        from agent.runs import llm_responses

        return await llm_responses.handle(gateway, method, path.removeprefix(OPENAI_PREFIX),
                                          body)  # fmt: skip
    if not path.startswith(PREFIX) or path.removeprefix(PREFIX) not in PATHS:
        return error_reply(404, "not_found_error", "Only /v1/messages is served here.")
    endpoint = path.removeprefix(PREFIX)
    refused = precheck(gateway, method, body)
    if refused is not None:
        return error_reply(*refused)
    reach = _network_reach(headers, body)
    if reach is not None:
        return error_reply(400, "invalid_request_error", reach)
    # Counting tokens is free; a model call is checked against the budget.
    if endpoint == "/v1/messages" and (refused := await budget_refusal(gateway)) is not None:
        return error_reply(*refused)
    return await _forward(gateway, endpoint, query, headers, body)


def precheck(gateway: Gateway, method: str, body: bytes) -> tuple[int, str, str] | None:
    """Why a call is refused before it is even read (status, error type, message), whichever
    API it speaks; None when it may go on."""
    if method != "POST":
        return 405, "invalid_request_error", "POST only."
    if not gateway.running:
        return 403, "permission_error", "No run of this conversation is going on."
    if len(body) > MAX_BODY:
        return 413, "request_too_large", "The request is too large."
    if not settings.ANTHROPIC_API_KEY:
        return 503, "api_error", ("This deployment has no model key (ANTHROPIC_API_KEY): "
                                  "CLI agents need a real model.")  # fmt: skip
    return None


async def budget_refusal(gateway: Gateway) -> tuple[int, str, str] | None:
    """The owner's budget, checked at each call, as it is spent: a CLI's one prompt may make
    dozens. 403, not 429: a CLI would retry a 429, and retrying cannot help."""
    refused = await gateway.refusal()
    return None if refused is None else (403, "permission_error", refused)


# What would let the model provider reach the network for a sandbox that has none:
# server-side tools, MCP servers, and the beta flags that switch them on.
SERVER_TOOLS = ("web_search", "web_fetch", "code_execution", "bash_code_execution",
                "text_editor_code_execution", "mcp")  # fmt: skip
NETWORK_BETAS = ("mcp-client", "web-fetch", "web-search", "code-execution", "files-api")


def _network_reach(headers, body: bytes) -> str | None:
    """Why a call is refused, when it asks the provider to reach the network or run code
    on the deployment's account; None when it does not."""
    betas = [b.strip() for b in (headers.get("anthropic-beta") or "").split(",") if b.strip()]
    if any(b.startswith(NETWORK_BETAS) for b in betas):
        return "Server-side network and code-execution features are not available here."
    try:
        request = json.loads(body) if body else {}
    except ValueError:
        return None  # the upstream says what is wrong with it
    if not isinstance(request, dict):
        return None
    if request.get("mcp_servers") or request.get("container"):
        return "MCP servers and code-execution containers are not available here."
    for tool in request.get("tools") or ():
        kind = tool.get("type", "") if isinstance(tool, dict) else ""
        if isinstance(kind, str) and kind.startswith(SERVER_TOOLS):
            return (f"The server-side tool {kind!r} is not available here: the sandbox has "
                    "no network, and neither may the model on its behalf.")  # fmt: skip
    return None


def _model_of(body: bytes) -> str:
    try:
        model = json.loads(body).get("model")
    except (ValueError, AttributeError):
        return ""
    return model if isinstance(model, str) else ""


_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = (
    weakref.WeakKeyDictionary()
)


def _upstream_session() -> aiohttp.ClientSession:
    """One connection pool per event loop (an aiohttp session is bound to its loop)."""
    loop = asyncio.get_running_loop()
    session = _sessions.get(loop)
    if session is None or session.closed:
        session = _sessions[loop] = aiohttp.ClientSession(timeout=UPSTREAM_TIMEOUT,
                                                          auto_decompress=False)  # fmt: skip
    return session


async def close_upstream() -> None:
    """Close this loop's connection pool (a test's loop ends; a server's lives on)."""
    session = _sessions.pop(asyncio.get_running_loop(), None)
    if session is not None:
        await session.close()


async def post_upstream(endpoint: str, query: str, headers: dict[str, str],
                        body: bytes) -> aiohttp.ClientResponse | Reply:  # fmt: skip
    """The call sent upstream with the deployment's key: the upstream's response, or an
    error reply (Anthropic's shape) when the upstream cannot be reached."""
    upstream = (settings.ANTHROPIC_BASE_URL or DEFAULT_UPSTREAM).rstrip("/")
    sent = {**headers, "x-api-key": settings.ANTHROPIC_API_KEY}
    sent["accept-encoding"] = "identity"  # metered as it passes: no compressed stream
    try:
        return await _upstream_session().post(
            upstream + endpoint + (f"?{query}" if query else ""), data=body, headers=sent
        )
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.warning("the model upstream is unreachable: %s", exc)
        return error_reply(502, "api_error", f"The model upstream is unreachable: {exc}")


async def _forward(gateway: Gateway, endpoint: str, query: str, headers, body: bytes) -> Reply:
    sent = {name: headers[name] for name in REQUEST_HEADERS if name in headers}
    response = await post_upstream(endpoint, query, sent, body)
    if isinstance(response, Reply):
        return response
    kept = {name: response.headers[name] for name in RESPONSE_HEADERS if name in response.headers}
    meter = None
    if endpoint == "/v1/messages" and response.status < 300:  # counting tokens is free
        meter = Meter(streamed="event-stream" in kept.get("content-type", ""))

    async def relay() -> AsyncGenerator[bytes, None]:
        try:
            async for chunk in response.content.iter_any():
                if meter is not None:
                    meter.feed(chunk)
                yield chunk
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("the model upstream's answer broke off: %s", exc)
        finally:
            response.release()
            if meter is not None:
                gateway.meter_answer(meter, body)

    return Reply(response.status, kept, relay())
