"""Log records with the request's and the conversation's ids, as text or JSON lines, with
the deployment's secrets masked.

The ids live in context variables: a request's middleware sets ``request_id`` (and the
``conversation_id`` of a conversation URL), a socket sets the conversation it serves, a run
the conversation it runs; tasks and asgiref's threads copy the context, so every record
written on their behalf carries them. ``settings.LOGGING`` wires the filter and formatters.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import time
import uuid

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
# The request being served, for code that records who did something (agent/audit.py).
current_request: contextvars.ContextVar = contextvars.ContextVar("current_request", default=None)
conversation_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "conversation_id", default=None
)

REDACTED = "[redacted]"
# A proxy's own id (nginx's $request_id) is kept so both logs can be joined; anything else
# in the header is replaced, so a client cannot write into the log.
_INCOMING_ID = re.compile(r"[A-Za-z0-9._-]{8,64}")


def new_request_id(incoming: str | None) -> str:
    if incoming and _INCOMING_ID.fullmatch(incoming):
        return incoming
    return uuid.uuid4().hex


class ContextFilter(logging.Filter):
    """Puts the current ids on every record (None where unknown)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        record.conversation_id = conversation_id.get()
        return True


class _Redacting(logging.Formatter):
    """Masks the configured secrets in the whole formatted record, traceback included: a
    secret that reaches a message or an exception by accident is never written out."""

    converter = time.gmtime  # UTC, whatever the host's zone

    def __init__(self, *args, secrets: tuple[str, ...] = (), **kwargs):
        super().__init__(*args, **kwargs)
        # Longest first, so a secret containing another is masked whole.
        self.secrets = tuple(sorted((s for s in secrets if len(s) >= 8), key=len, reverse=True))

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return text


class TextFormatter(_Redacting):
    def format(self, record: logging.LogRecord) -> str:
        ids = " ".join(
            f"{name}={value}"
            for name in ("request_id", "conversation_id")
            if (value := getattr(record, name, None))
        )
        line = super().format(record)
        return self.redact(f"{line} [{ids}]" if ids else line)


class JsonFormatter(_Redacting):
    """One JSON object per line: what log shippers (journald → Loki, Docker → …) parse."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in ("request_id", "conversation_id"):
            if value := getattr(record, name, None):
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return self.redact(json.dumps(entry, ensure_ascii=False, default=str))


class RequestContextMiddleware:
    """A request id for each request (the proxy's ``X-Request-ID`` when well-formed), and
    the conversation of a conversation URL; the id goes back in ``X-Request-ID``."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        rid = new_request_id(request.headers.get("X-Request-ID"))
        # The ids are set, not reset afterwards: Django logs a 4xx/5xx response after the
        # middleware returns, in the request's own task (asgiref carries these values back to
        # it), and that record needs them too. Each request starts with both set afresh.
        request_id.set(rid)
        conversation_id.set(None)
        # Who and from where, for the audit log's lines: reset when the request is answered,
        # so that a later line written in the same thread (a WSGI worker, a test's client, a
        # command) is never put on this request's user.
        token = current_request.set(request)
        try:
            response = self.get_response(request)
        finally:
            current_request.reset(token)
        response["X-Request-ID"] = rid
        return response

    def process_view(self, request, view, args, kwargs):
        if "conversation_id" in kwargs:
            conversation_id.set(str(kwargs["conversation_id"]))
