"""Patch 0001 (native/patches/0001-server-http-keepalive-after-stream.patch): after a
streamed response llama-server keeps the connection it advertised as keep-alive.

Unpatched, the chunked content provider reported "cancelled" once the stream ended and
httplib closed the socket; a pooled client's next request then failed with "Server
disconnected without sending a response" (4 of 30 back-to-back streams before the patch).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from native_server import running_server

from orchestrator.models.tiny import write_tiny_model

pytestmark = [pytest.mark.native, pytest.mark.slow]

N_STREAMS = 100


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("keepalive") / "tiny.gguf", mode="echo", q=0.0, seed=0)


def _stream_once(client: httpx.Client, url: str) -> tuple[str, tuple[str, int], bool]:
    """One streamed completion; returns (generated text, the client's local socket address,
    whether the server announced ``Connection: close``)."""
    body = {"prompt": "Hello world", "n_predict": 4, "stream": True, "temperature": 0.0, "cache_prompt": False}
    text, saw_stop = "", False
    with client.stream("POST", f"{url}/completion", json=body) as resp:
        assert resp.status_code == 200
        closes = resp.headers.get("connection", "").lower() == "close"
        local = resp.extensions["network_stream"].get_extra_info("client_addr")
        for line in resp.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[len("data: ") :])
                text += event.get("content", "")
                saw_stop = saw_stop or bool(event.get("stop"))
    assert saw_stop, "the stream ended without its final event"
    return text, local, closes


def test_back_to_back_streams_reuse_one_connection(tiny_model: Path) -> None:
    with running_server(tiny_model) as url:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        with httpx.Client(limits=limits, timeout=30.0) as client:
            results = [_stream_once(client, url) for _ in range(N_STREAMS)]
    texts = {text for text, _, _ in results}
    sockets = {local for _, local, _ in results}
    announced_close = [i for i, (_, _, closes) in enumerate(results) if closes]
    # the echo model is deterministic: every stream produced the same non-empty text
    assert len(texts) == 1 and texts.pop()
    # httpx would have raised RemoteProtocolError on a dropped connection; one local
    # address for all 100 requests means the server never closed it
    assert len(sockets) == 1, f"{len(sockets)} connections for {N_STREAMS} streams"
    # httplib's keep_alive_max_count is 100: only the 100th response may say it closes
    assert set(announced_close) <= {99}
