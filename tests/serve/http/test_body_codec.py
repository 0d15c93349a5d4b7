"""Content-Encoding decoding (``orchestrator.serve.http.body_codec``) on literal bytes: no server needed."""

from __future__ import annotations

import gzip
import zlib

import pytest
import zstandard

from orchestrator.errors import ApiError
from orchestrator.serve.http.body_codec import content_encodings, decode_body

BODY = b'{"model": "demo", "messages": [{"role": "user", "content": "U1"}]}'


def headers(value: str) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"application/json"), (b"content-encoding", value.encode())]


def raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


@pytest.mark.parametrize(
    ("coding", "encode"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", raw_deflate),
        ("zstd", zstandard.ZstdCompressor().compress),
        ("identity", lambda b: b),
    ],
)
def test_each_coding_round_trips(coding: str, encode: object) -> None:
    assert callable(encode)
    assert decode_body(headers(coding), encode(BODY), 1 << 20) == BODY


def test_stacked_codings_undone_last_first() -> None:
    data = zstandard.ZstdCompressor().compress(gzip.compress(BODY))
    assert content_encodings(headers("gzip, zstd")) == ["gzip", "zstd"]
    assert decode_body(headers("gzip, zstd"), data, 1 << 20) == BODY


def test_plain_body_is_the_same_object() -> None:
    assert decode_body([(b"content-type", b"application/json")], BODY, 10) is BODY


@pytest.mark.parametrize(
    ("coding", "encode"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("zstd", zstandard.ZstdCompressor().compress)],
)
def test_bomb_is_413_after_the_limit(coding: str, encode: object) -> None:
    """100 MB of zeros compress to ~100 KB; decoding stops at the limit instead of allocating it all."""
    assert callable(encode)
    bomb = encode(b"\0" * (100 << 20))
    assert len(bomb) < (1 << 20)
    with pytest.raises(ApiError) as err:
        decode_body(headers(coding), bomb, 1 << 20)
    assert err.value.status == 413 and err.value.code == "request_too_large"
    assert "decompressed" in err.value.message


def test_exactly_the_limit_passes() -> None:
    data = b"x" * 4096
    assert decode_body(headers("gzip"), gzip.compress(data), 4096) == data
    with pytest.raises(ApiError):
        decode_body(headers("gzip"), gzip.compress(data), 4095)


@pytest.mark.parametrize("coding", ["br", "compress", "gzip, br"])
def test_unknown_coding_is_415(coding: str) -> None:
    with pytest.raises(ApiError) as err:
        decode_body(headers(coding), gzip.compress(BODY), 1 << 20)
    assert err.value.status == 415 and err.value.type == "invalid_request_error"
    assert "br" in err.value.message or "compress" in err.value.message


# mtime=0: gzip's header holds the second it was written in, and each xdist worker collects the
# ids on its own: two seconds apart, the ids differ and the whole run stops at collection
@pytest.mark.parametrize(
    ("coding", "data"),
    [("gzip", BODY), ("gzip", gzip.compress(BODY, mtime=0)[:-6]), ("deflate", b"\x78\x9c garbage"), ("zstd", BODY)],
)
def test_invalid_or_truncated_data_is_400_naming_the_coding(coding: str, data: bytes) -> None:
    with pytest.raises(ApiError) as err:
        decode_body(headers(coding), data, 1 << 20)
    assert err.value.status == 400 and err.value.code == "invalid_content_encoding"
    assert coding in err.value.message and "JSON" not in err.value.message
