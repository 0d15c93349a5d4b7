"""Limits at the HTTP layer, below the app: header size (431), slow headers (408), JSON errors for bad HTTP.

uvicorn's httptools protocol buffers a header line of any length (a 10 MB line was accepted,
ten such connections held 80 MB) and waits for headers forever (slowloris). This subclass
(``protocol_class``) counts the bytes of each request head as they arrive and answers 431 once
they pass ``server.max_header_bytes``, answers 408 when a head is not complete within
``server.timeouts.client_header`` seconds of its first byte (or of the connection), and answers a
malformed request with a JSON 400 instead of uvicorn's plain text; each closes the connection.
Bytes that are not HTTP after a valid request on the same connection (garbage after a body, a
broken pipelined request) do not cost that request its answer: the 400 is held until every
request before it has been answered, then sent, and the connection closed; nothing more is read.
A slow *body* is bounded in the app (``orchestrator.serve.http.body.read_body``), where the error can
take its route's shape. ``uvicorn_config`` builds the uvicorn config with this protocol; both
``orchestrator up`` and the tests' proxy harness use it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from orchestrator.errors import ApiError

REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


def error_response(err: ApiError) -> bytes:
    """A whole HTTP/1.1 response carrying ``err`` in the OpenAI error shape, closing the connection."""
    body = json.dumps(err.body()).encode()
    head = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % (
        err.status,
        REASONS.get(err.status, b"Error"),
        len(body),
    )
    return head + body


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bounded request head (size and time); see the module docstring."""

    max_header_bytes = 64 * 1024
    header_timeout = 10.0

    def _unsupported_upgrade_warning(self) -> None:
        """Say nothing: an upgrade reaches the app as HTTP on purpose (Codex's WebSocket gets its
        426 there, ``serve.responses.websocket``); uvicorn's two warnings per request would tell the
        user to install a WebSocket library."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_bytes = 0
        self._tail = b""
        self._in_head = True
        self._head_timer: asyncio.TimerHandle | None = self.loop.call_later(self.header_timeout, self._head_too_slow)
        self._after_answers: ApiError | None = None  # the 400 for bytes after requests still being answered

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._after_answers is not None:
            return  # the connection ends after its 400; what follows the bad bytes is not read
        if self._in_head and not self._count_head(data):
            self._refuse(
                ApiError(
                    431,
                    f"request headers are larger than {self.max_header_bytes} bytes (server.max_header_bytes)",
                    code="headers_too_large",
                )
            )
            return
        super().data_received(data)

    def _count_head(self, data: bytes) -> bool:
        """Count the head's bytes in ``data`` (up to the blank line); False once over the limit."""
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_too_slow)
        window = self._tail + data
        end = window.find(b"\r\n\r\n")
        self._head_bytes += len(data) if end < 0 else max(0, end + 4 - len(self._tail))
        self._tail = window[-3:]
        return self._head_bytes <= self.max_header_bytes

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._cancel_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        # the next bytes on this connection are the next request's head
        self._in_head, self._head_bytes, self._tail = True, 0, b""

    def send_400_response(self, msg: str) -> None:
        err = ApiError(400, f"malformed HTTP request: {msg}", code="invalid_http")
        if self.pipeline or (self.cycle is not None and not self.cycle.response_complete):
            # a valid request before the bad bytes is still being answered: its answer goes first
            self._cancel_head_timer()
            self._in_head = False
            self._after_answers = err
            return
        self._refuse(err)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        done = not self.pipeline and (self.cycle is None or self.cycle.response_complete)
        if self._after_answers is not None and done:
            err, self._after_answers = self._after_answers, None
            self._refuse(err)

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            if self._head_bytes == 0:
                self.transport.close()  # a connection that never sent a byte: nothing to answer
                return
            self._refuse(
                ApiError(
                    408,
                    f"request headers not received within {self.header_timeout:g} s (server.timeouts.client_header)",
                    code="request_timeout",
                )
            )

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _refuse(self, err: ApiError) -> None:
        self._cancel_head_timer()
        self._in_head = False
        if not self.transport.is_closing():
            self.transport.write(error_response(err))
            self.transport.close()


def protocol_class(max_header_bytes: int, header_timeout: float) -> type[LimitedHttpToolsProtocol]:
    """The protocol class with these limits (bytes, seconds)."""
    return type(
        "ConfiguredHttpProtocol",
        (LimitedHttpToolsProtocol,),
        {"max_header_bytes": max_header_bytes, "header_timeout": header_timeout},
    )


def uvicorn_config(app: Any, max_header_bytes: int, header_timeout: float, **kwargs: Any) -> uvicorn.Config:
    """``uvicorn.Config`` for ``app`` with the bounded protocol (``kwargs`` go to uvicorn). No
    WebSocket protocol: an upgrade request reaches the app as HTTP, which answers Codex's
    ``GET /v1/responses`` upgrade 426 (``serve.responses.websocket``), whatever is installed."""
    kwargs.setdefault("ws", "none")
    return uvicorn.Config(app, http=protocol_class(max_header_bytes, header_timeout), **kwargs)
