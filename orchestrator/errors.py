"""Errors for the two audiences: a person at the terminal, and an HTTP client.

``UserError`` is raised for any mistake a person can fix (bad models.yaml, missing build,
busy port). The CLI prints its message on one line (plus an optional hint) and exits with
status 2; it never shows a traceback for one.

``ApiError`` is raised inside the proxy and becomes the OpenAI error envelope
``{"error": {"message", "type", "param", "code"}}`` with the right HTTP status. The
status-to-type map lives here and only here (after llama-swap's ``httperror.go``).
"""

from __future__ import annotations

from typing import Any


class UserError(Exception):
    """A mistake a person can fix. ``str(err)`` says what and where; ``hint`` says what to do."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


# OpenAI's error "type" for each status the proxy produces.
STATUS_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    426: "invalid_request_error",
    431: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}


class ApiError(Exception):
    """An error answered to an HTTP client in the OpenAI shape.

    Args:
        status: HTTP status code (400, 401, 404, 413, 429, 502, 503, ...).
        message: human-readable text.
        param: the offending request field, e.g. ``"messages[0].role"``.
        code: a machine code such as ``"model_not_found"``.
        retry_after: seconds, sent as ``Retry-After`` (used with 503/429).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,
        type_: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.retry_after = retry_after
        self.type = type_ or STATUS_TYPES.get(status, "server_error")

    def body(self) -> dict[str, Any]:
        """The JSON body: ``{"error": {"message", "type", "param", "code"}}``."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def headers(self) -> dict[str, str]:
        """Extra response headers (``Retry-After`` in whole seconds when set)."""
        if self.retry_after is None:
            return {}
        return {"Retry-After": str(max(1, round(self.retry_after)))}
