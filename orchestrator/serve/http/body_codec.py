"""Compressed request bodies: ``Content-Encoding: gzip``, ``deflate``, ``zstd`` (and ``identity``).

Clients that send large requests compress them (Codex-style agents send zstd or gzip bodies).
:func:`decode_body` undoes every listed coding, last applied first (RFC 9110 section 8.4), and
never holds more than ``limit`` decoded bytes: output is produced in bounded steps, so a small
compression bomb is refused with 413 after ``limit`` bytes, not after exhausting memory. The limit
is ``server.max_body_bytes``, the same number that bounds uncompressed bodies.

Errors (raised as ``ApiError``, rendered in the route's error shape):

- an encoding other than gzip, x-gzip, deflate, zstd or identity: 415 ``unsupported_content_encoding``;
- bytes that are not valid for the declared coding: 400 ``invalid_content_encoding`` (the message
  names the coding, never quotes the codec's internals as a JSON error);
- more than ``limit`` bytes once decoded: 413 ``request_too_large``.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Iterable

import zstandard

from orchestrator.errors import ApiError

SUPPORTED = ("gzip", "deflate", "zstd", "identity")
# Decoded bytes produced per step; the limit is checked between steps.
_STEP = 1 << 16


def content_encodings(headers: Iterable[tuple[bytes, bytes]]) -> list[str]:
    """The codings named by every ``Content-Encoding`` header, in the order they were applied.

    Args:
        headers: raw ASGI headers (lower-case names, bytes values).

    Returns:
        Lower-case coding names, ``identity`` and empty entries left out (``[]`` for a plain body).
    """
    codings: list[str] = []
    for name, value in headers:
        if name == b"content-encoding":
            for part in value.decode("latin-1").split(","):
                coding = part.strip().lower()
                if coding and coding != "identity":
                    codings.append("gzip" if coding == "x-gzip" else coding)
    return codings


def _too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        f"request body is larger than {limit} bytes once decompressed (server.max_body_bytes)",
        code="request_too_large",
    )


def _invalid(coding: str) -> ApiError:
    return ApiError(
        400,
        f"request body is not valid {coding} data; send it uncompressed or fix its encoder",
        code="invalid_content_encoding",
    )


def _inflate(data: bytes, wbits: int, limit: int, coding: str) -> bytes:
    """zlib-family decoding (gzip members, zlib or raw deflate) of at most ``limit`` bytes."""
    out: list[bytes] = []
    size = 0
    rest = data
    while rest:
        decoder = zlib.decompressobj(wbits)
        buf = rest
        try:
            while buf and not decoder.eof:
                chunk = decoder.decompress(buf, min(_STEP, limit + 1 - size))
                size += len(chunk)
                if size > limit:
                    raise _too_large(limit)
                out.append(chunk)
                buf = decoder.unconsumed_tail
                if not chunk and not buf:
                    break
        except zlib.error:
            raise _invalid(coding) from None
        if not decoder.eof:
            raise _invalid(coding)  # truncated
        # gzip allows several members back to back (RFC 1952 section 2.2); zlib/deflate do not
        rest = decoder.unused_data if wbits > 15 else b""
        if decoder.unused_data and wbits <= 15:
            raise _invalid(coding)
    return b"".join(out)


def _zstd(data: bytes, limit: int) -> bytes:
    """zstd decoding (every frame) of at most ``limit`` bytes."""
    out: list[bytes] = []
    size = 0
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    try:
        while True:
            chunk = reader.read(min(_STEP, limit + 1 - size))
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            out.append(chunk)
    except zstandard.ZstdError:
        raise _invalid("zstd") from None
    return b"".join(out)


def decode_one(data: bytes, coding: str, limit: int) -> bytes:
    """Undo one content coding.

    Args:
        data: the encoded bytes.
        coding: ``gzip``, ``deflate`` or ``zstd`` (lower case).
        limit: the most decoded bytes accepted.

    Raises:
        ApiError: 415 for another coding, 400 for invalid data, 413 past ``limit``.
    """
    if coding == "gzip":
        return _inflate(data, 16 + zlib.MAX_WBITS, limit, coding)
    if coding == "deflate":
        # RFC 9110 says zlib-wrapped; some clients send raw deflate: the zlib header tells them apart
        # (its first byte's low nibble is 8, and the first two bytes are a multiple of 31).
        wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
        return _inflate(data, zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS, limit, coding)
    if coding == "zstd":
        return _zstd(data, limit)
    raise ApiError(
        415,
        f"Content-Encoding {coding!r} is not supported; use one of {', '.join(SUPPORTED)}",
        code="unsupported_content_encoding",
        type_="invalid_request_error",
    )


def decode_body(headers: Iterable[tuple[bytes, bytes]], raw: bytes, limit: int) -> bytes:
    """The request body with every ``Content-Encoding`` undone (``raw`` itself when there is none).

    Args:
        headers: raw ASGI request headers.
        raw: the body as received (already bounded by ``limit`` on the wire).
        limit: ``server.max_body_bytes``; applies to the decoded size too.

    Raises:
        ApiError: 415 unsupported coding, 400 invalid data, 413 too large once decoded.
    """
    codings = content_encodings(headers)
    for coding in codings:  # reject an unknown coding before spending work on the others
        if coding not in SUPPORTED:
            decode_one(raw, coding, limit)
    for coding in reversed(codings):
        raw = decode_one(raw, coding, limit)
    return raw
