"""What can go wrong talking to llama-server (or a peer), and the error a client gets for it.

The transport's failures are sorted into :class:`TransportFailure` kinds by ``orchestrator.serve.upstream.client``
(by exception type, never by message text); :func:`to_api_error` maps them and
:class:`UpstreamTimeout` onto ``ApiError``; :func:`from_upstream_status` maps llama-server's own
error answers; :func:`stalled_error` names a request cut off by a stalled replica's restart.
"""

from __future__ import annotations

import json

from orchestrator.errors import ApiError
from orchestrator.serve.repair import agent_errors, llama_fields

# Seconds a client is told to wait when the instance cannot be reached (it is likely restarting).
UNREACHABLE_RETRY_AFTER = 5.0


class TransportFailure(Exception):
    """Talking to the upstream failed below HTTP (``args[0]``: what happened)."""


class Refused(TransportFailure):
    """The connection could not be made (the instance died or is restarting)."""


class NoResponse(TransportFailure):
    """The connection closed or reset before any response head (nothing was processed)."""


class Broken(TransportFailure):
    """The connection broke after the response started."""


class UpstreamTimeout(Exception):
    """The upstream was silent for longer than a configured timeout.

    Args:
        phase: ``"connect"``, ``"first_byte"`` (no response head in time) or ``"idle"`` (silence
            inside the body).
        seconds: the limit that was exceeded.
    """

    def __init__(self, phase: str, seconds: float) -> None:
        what = {"connect": "connection", "first_byte": "response"}.get(phase, "data")
        super().__init__(f"no {what} from llama-server for {seconds:g} s")
        self.phase = phase
        self.seconds = seconds


#: Every failure of an upstream exchange (what the relay and the request catch).
UPSTREAM_FAILURES: tuple[type[Exception], ...] = (UpstreamTimeout, TransportFailure)
#: The replica answered nothing: it refused the connection or closed it before any response head.
NOTHING_ANSWERED: tuple[type[Exception], ...] = (Refused, NoResponse)


class NothingAnswered(Exception):
    """The replica answered nothing (refused the connection, closed it before any response head);
    ``args``: the transport error, the replica's stall count when the request was sent, and whether
    it may have worked on the request (see ``pipeline.RESEND_WITHIN_S``)."""


def died_working(instance: str) -> ApiError:
    """A replica died while it may have been answering a whole (non-streamed) request: not resent
    (the answer may have been half made, and a second try doubles the work), a 502 to retry."""
    return ApiError(
        502,
        f"{instance} died while it may have been answering this request; it is restarting: retry",
        code="upstream_died",
        retry_after=UNREACHABLE_RETRY_AFTER,
    )


def to_api_error(exc: BaseException) -> ApiError:
    """Map a transport failure talking to llama-server to the error a client gets.

    Args:
        exc: an :class:`UpstreamTimeout` or a :class:`TransportFailure`.

    Returns:
        ``ApiError`` 504 ``upstream_timeout`` for timeouts; 503 ``upstream_unavailable`` with
        ``Retry-After`` when the instance refused the connection (it died or is restarting);
        502 ``upstream_disconnected`` (also with ``Retry-After``) for a connection lost or broken
        mid-exchange; 502
        ``upstream_error`` for any other transport error.

    Raises:
        TypeError: for an exception that is not a transport failure (a programming error: let
            it reach the 500 handler instead of hiding it).
    """
    if isinstance(exc, UpstreamTimeout):
        return ApiError(504, str(exc), code="upstream_timeout")
    if isinstance(exc, Refused):
        return ApiError(
            503,
            "llama-server is not reachable (it may be restarting)",
            code="upstream_unavailable",
            retry_after=UNREACHABLE_RETRY_AFTER,
        )
    if isinstance(exc, (NoResponse, Broken)):
        return ApiError(
            502,
            "llama-server closed the connection before the response was complete",
            code="upstream_disconnected",
            retry_after=UNREACHABLE_RETRY_AFTER,  # it died or was killed: the supervisor restarts it
        )
    if isinstance(exc, TransportFailure):
        return ApiError(502, f"error talking to llama-server ({exc})", code="upstream_error")
    raise TypeError(f"not a transport failure: {exc!r}") from exc


def stalled_error(new_stalls: int, warnings: list[str]) -> ApiError | None:
    """The error for a request cut off because its replica stalled and was killed, else None.

    Args:
        new_stalls: stalls of the replica since the request was sent (``Instance.stalls``).
        warnings: the replica's warnings (the stall's reason is one of them).
    """
    if new_stalls <= 0:
        return None
    stall = next((w for w in warnings if w.startswith("stalled")), "stalled")
    message = f"llama-server stopped making progress on this request and was restarted ({stall})"
    return ApiError(502, message, code="upstream_stalled", retry_after=UNREACHABLE_RETRY_AFTER)  # restarting


def from_upstream_status(status: int, body: bytes) -> ApiError:
    """Turn a llama-server error response into the error the client gets.

    Args:
        status: llama-server's HTTP status (>= 400).
        body: its body; llama-server sends ``{"error": {"code", "message", "type"}}``.

    Returns:
        For a 501 (the model's launch does not serve the route), a 400 ``not_supported``. For a
        500 that is a client's mistake (``llama_fields.client_mistake``: a template
        exception, malformed tools...), a 400 naming the field. For other 5xx, ``ApiError`` 502
        ``upstream_error`` carrying llama-server's message. For 4xx, the same status, message and (string)
        ``type``/``code`` in the OpenAI shape.
    """
    message, type_, code = None, None, None
    try:
        err = json.loads(body).get("error")
    except (ValueError, AttributeError):
        err = None
    if isinstance(err, dict):
        message = err.get("message") if isinstance(err.get("message"), str) else None
        type_ = err.get("type") if isinstance(err.get("type"), str) else None
        code = err.get("code") if isinstance(err.get("code"), str) else None
    elif isinstance(err, str):
        message = err
    if message is None:
        message = body[:500].decode("utf-8", errors="replace").strip() or f"HTTP {status}"
    if status == 501:
        # llama-server's "not supported" (/v1/embeddings without --embeddings, /infill on a model
        # without FIM tokens): the client asked this model for what it does not serve (its
        # /v1/models capabilities say so), a client's mistake and a 400, not a server fault
        return ApiError(400, f"llama-server: {message}", code="not_supported", type_="invalid_request_error")
    if status == 500 and (mistake := llama_fields.client_mistake(message)) is not None:
        return mistake  # the exception came from parsing the client's body, not from a fault
    if status >= 500:
        return ApiError(502, f"llama-server answered {status}: {message}", code="upstream_error")
    return agent_errors.overflow(message, type_) or ApiError(status, message, type_=type_, code=code)
