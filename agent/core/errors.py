"""Turn exceptions from the API client into (code, message) for an ``error`` event."""

from __future__ import annotations

_TYPE_CODES = {
    "rate_limit_error": "rate_limited",
    "overloaded_error": "overloaded",
    "authentication_error": "authentication_error",
    "permission_error": "permission_error",
    "invalid_request_error": "invalid_request",
    "not_found_error": "not_found",
    "request_too_large": "request_too_large",
    "api_error": "api_error",
    "billing_error": "billing_error",
    "timeout_error": "timeout",
}


def _api_error(body: object) -> tuple[str | None, str | None]:
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            return err.get("type"), err.get("message")
    return None, None


def classify(exc: BaseException) -> tuple[str, str]:
    import anthropic  # here, not at import time: the SDK takes a second to import

    if isinstance(exc, anthropic.APIStatusError):
        err_type, err_message = _api_error(exc.body)
        status = exc.status_code
        code = _TYPE_CODES.get(err_type or "", err_type or f"http_{status}")
        where = "mid-stream" if status == 200 else f"HTTP {status}"
        detail = err_message or exc.message
        return code, f"API error ({where}, {err_type or 'error'}): {detail}"
    if isinstance(exc, anthropic.APITimeoutError):
        return "timeout", "The API request timed out."
    if isinstance(exc, anthropic.APIConnectionError):
        return "connection_error", f"Could not reach the API: {exc}"
    name = type(exc).__name__
    return "stream_error", f"The response stream failed ({name}: {exc})"
