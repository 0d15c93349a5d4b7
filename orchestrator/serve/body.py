"""Reading a POST body off the ASGI channel under the size limit, and parsing it as a JSON object.

Errors are the client's: 413 over ``server.max_body_bytes``, 400 for a malformed
``Content-Length`` or a body that is not a JSON object.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from orchestrator.errors import ApiError

Receive = Callable[[], Awaitable[dict[str, Any]]]


class ClientGone(Exception):
    """The client disconnected before its request was read."""


async def read_body(headers: list[tuple[bytes, bytes]], receive: Receive, limit: int) -> bytes:
    """Read the request body (bytes), refusing more than ``limit`` bytes.

    Raises:
        ApiError: 413 when ``Content-Length`` or the bytes actually received exceed ``limit``;
            400 for a malformed ``Content-Length``.
        ClientGone: the client disconnected while sending.
    """
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


def parse_body(raw: bytes) -> dict[str, Any]:
    """Parse a request body as a JSON object.

    Raises:
        ApiError: 400 when it is not valid JSON or not an object.
    """
    try:
        # NaN/Infinity are not JSON (RFC 8259) and llama-server's parser rejects them: refuse here
        body = json.loads(raw, parse_constant=_refuse_constant)
    except ValueError as err:
        raise ApiError(400, f"request body is not valid JSON: {err}", code="invalid_json") from None
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object", code="invalid_json")
    return body


def dump_body(body: dict[str, Any]) -> bytes:
    """``body`` as compact UTF-8 JSON, the bytes sent upstream after a repair."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
