"""Reading a POST body off the ASGI channel under the size limit, and parsing it as a JSON object.

Errors are the client's: 413 over ``server.max_body_bytes``, 400 for a malformed
``Content-Length`` or a body that is not a JSON object.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.errors import ApiError
from orchestrator.serve.http import shapes as body_shapes
from orchestrator.serve.http.body_codec import decode_body

if TYPE_CHECKING:
    from orchestrator.config.schema import ServerConfig

Receive = Callable[[], Awaitable[dict[str, Any]]]


class ClientGone(Exception):
    """The client disconnected before its request was read."""


async def read_body(
    headers: list[tuple[bytes, bytes]], receive: Receive, limit: int, timeout: float | None = None
) -> bytes:
    """Read the request body (bytes), refusing more than ``limit`` bytes or taking over ``timeout`` s.

    A client that sends its body a byte at a time (slowloris) would otherwise hold the request
    and its connection for ever.

    Raises:
        ApiError: 413 when ``Content-Length`` or the bytes actually received exceed ``limit``;
            400 for a malformed ``Content-Length``; 408 when the body is not complete within
            ``timeout`` seconds (``server.timeouts.client_body``).
        ClientGone: the client disconnected while sending.
    """
    if timeout is None:
        return await _read_body(headers, receive, limit)
    try:
        async with asyncio.timeout(timeout):
            return await _read_body(headers, receive, limit)
    except TimeoutError:
        raise ApiError(
            408, f"request body not received within {timeout:g} s (server.timeouts.client_body)", code="request_timeout"
        ) from None


async def _read_body(headers: list[tuple[bytes, bytes]], receive: Receive, limit: int) -> bytes:
    for name, value in headers:
        if name == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                raise ApiError(400, "malformed Content-Length header") from None
            if declared > limit:
                raise _too_large(limit)
            break
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        parts.append(chunk)
        if not message.get("more_body", False):
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"request body is larger than {limit} bytes (server.max_body_bytes)", code="request_too_large")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        # json.loads reads 1e400 as infinity, which would go upstream as "Infinity" (not JSON)
        raise ValueError(f"the number {text} is too large for any field")
    return value


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(value: Any, path: str) -> str | None:
    """The path of the first string (or key) in ``value`` holding a lone UTF-16 surrogate, else None."""
    if isinstance(value, str):
        return path if _SURROGATE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if _SURROGATE.search(key):
                return f"{path}.{key!a}".lstrip(".")
            found = _lone_surrogate(item, f"{path}.{key}".lstrip("."))
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _lone_surrogate(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def to_utf8(raw: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    """The body as UTF-8 bytes: the form llama-server reads (RFC 8259 allows only UTF-8).

    A UTF-8 body without a byte-order mark is returned as is. A byte-order mark, UTF-16 or
    UTF-32 (detected as RFC 4627 says, ``json.detect_encoding``), or a ``charset`` in
    ``Content-Type`` is decoded and re-encoded as UTF-8.

    Raises:
        ApiError: 415 for a charset Python does not know; 400 for bytes that are not valid
            in the body's encoding (naming the byte offset).
    """
    charset = _charset(headers)
    encoding: str = json.detect_encoding(raw)
    if encoding == "utf-8" and charset not in (None, "utf-8", "utf8", "us-ascii", "ascii"):
        encoding = charset
    try:
        text = raw.decode(encoding)
    except LookupError:
        raise ApiError(
            415, f"unknown charset {charset!r} in Content-Type; send UTF-8", code="unsupported_charset"
        ) from None
    except UnicodeDecodeError as err:
        raise ApiError(
            400,
            f"request body is not valid {encoding} at byte {err.start} (send UTF-8, or name the charset)",
            code="invalid_encoding",
        ) from None
    return raw if encoding == "utf-8" else text.encode("utf-8", errors="surrogatepass")


def _charset(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name == b"content-type":
            for param in value.decode("latin-1").split(";")[1:]:
                key, _, val = param.strip().partition("=")
                if key.strip().lower() == "charset":
                    return val.strip().strip('"').lower() or None
    return None


def limits_of(server: ServerConfig) -> body_shapes.Limits:
    """``server.request_limits`` as the body check's bounds."""
    return body_shapes.Limits(**server.request_limits.model_dump())


def parse_body(
    raw: bytes, shape: body_shapes.Shape | None = None, limits: body_shapes.Limits | None = None
) -> dict[str, Any]:
    """Parse a request body (UTF-8, see :func:`to_utf8`) as a JSON object, and check what it holds.

    This is the one place every route's body passes before it is repaired, translated or
    forwarded: after parsing, ``orchestrator.serve.http.shapes`` checks it against ``shape`` (the
    route adapter's) and ``limits`` (integers beyond 64 bits, wrong types anywhere in the
    history, too many messages, parts, tools or characters).

    Raises:
        ApiError: 400 when it is not valid JSON or not an object, holds a number beyond any float
            (``1e400``), or a string with a lone UTF-16 surrogate (``"\\ud800"``: no UTF-8 can
            carry it, so it could be sent nowhere), naming where; 400 or 413 from the shape check.
    """
    try:
        # NaN/Infinity are not JSON (RFC 8259) and llama-server's parser rejects them: refuse here
        body = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite)
    except ValueError as err:
        raise ApiError(400, f"request body is not valid JSON: {err}", code="invalid_json") from None
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object", code="invalid_json")
    if _SURROGATE_ESCAPE.search(raw) and (where := _lone_surrogate(body, "")) is not None:
        raise ApiError(
            400,
            f"{where or 'a key'}: a string holds a lone UTF-16 surrogate (\\ud800-\\udfff without its pair); "
            "it is not text and cannot be encoded",
            param=where or None,
            code="invalid_json",
        )
    try:
        body_shapes.check(body, raw, shape, limits or body_shapes.Limits())
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply", code="invalid_json") from None
    return body


class BodyLimits(Protocol):
    """The limits a body is read under (``RequestSettings`` of the running config)."""

    @property
    def max_body(self) -> int:
        """Bytes, decoded or not (``server.max_body_bytes``)."""
        ...

    @property
    def body_timeout(self) -> float:
        """Seconds for the whole body (``server.timeouts.client_body``)."""
        ...

    @property
    def limits(self) -> body_shapes.Limits:
        """What it may hold (``server.request_limits``)."""
        ...


async def read_json(
    headers: list[tuple[bytes, bytes]], receive: Receive, settings: BodyLimits, shape: body_shapes.Shape | None
) -> tuple[dict[str, Any], bytes]:
    """The one body reader of every POST route: read under the size limit and timeout, decoded
    (``Content-Encoding``, any text encoding to UTF-8), parsed and checked against ``shape``.
    Returns the object and the UTF-8 bytes it was parsed from.

    Raises:
        ApiError: 400, 408, 413 or 415 naming what is wrong. ClientGone: the client left.
    """
    received = await read_body(headers, receive, settings.max_body, settings.body_timeout)
    raw = to_utf8(decode_body(headers, received, settings.max_body), headers)
    return parse_body(raw, shape, settings.limits), raw


def dump_body(body: dict[str, Any]) -> bytes:
    """``body`` as compact UTF-8 JSON, the bytes sent upstream after a repair."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
