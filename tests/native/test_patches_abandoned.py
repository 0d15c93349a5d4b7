"""Patch 0006 (native/patches/0006-server-queue-result-wait-deadline.patch): a request whose client
disconnected frees its slot within about a second, also while another slot streams.

Unpatched, every result for any task restarted a waiting request's timeout, so with a neighbour
slot busy its reader never asked whether the client was still there: the abandoned request
decoded on to its last token and the next request waited for it (11-25 s measured through the
endpoint).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from native_server import running_server

from orchestrator.models.tiny import write_tiny_model

pytestmark = [pytest.mark.native, pytest.mark.slow]

LONG = 30000  # tokens: about a minute on two CPU threads, for the streaming neighbour and the abandoned one


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("abandoned") / "tiny.gguf", mode="echo", q=0.0, seed=0)


def _stream_until(url: str, stop: threading.Event, chunks: list[float]) -> None:
    body = {"prompt": "Hello world", "n_predict": LONG, "stream": True, "ignore_eos": True, "cache_prompt": False}
    with httpx.Client(timeout=120) as client, client.stream("POST", f"{url}/completion", json=body) as r:
        for _ in r.iter_raw():
            chunks.append(time.monotonic())
            if stop.is_set():
                return


def test_an_abandoned_request_frees_its_slot_while_a_neighbour_streams(tiny_model: Path) -> None:
    # the tiny model is trained for 4,096 tokens, and llama-server caps a slot there: raised, so both
    # long requests run for tens of seconds (a slot gets 32,768 tokens)
    trained = ("--override-kv", "qwen35moe.context_length=int:65536")
    with running_server(tiny_model, "-np", "2", "-c", "65536", "-t", "1", *trained) as url:
        stop, chunks = threading.Event(), []
        neighbour = threading.Thread(target=_stream_until, args=(url, stop, chunks), daemon=True)
        neighbour.start()
        try:
            deadline = time.monotonic() + 30
            while not chunks and time.monotonic() < deadline:  # the neighbour's slot is decoding
                time.sleep(0.05)
            assert chunks, "the neighbour stream never started"
            long = {"prompt": "Hello world", "n_predict": LONG, "ignore_eos": True, "cache_prompt": False}
            with pytest.raises(httpx.ReadTimeout):  # the client gives up after a second and disconnects
                httpx.post(f"{url}/completion", json=long, timeout=httpx.Timeout(1.0, connect=5.0))
            started = time.monotonic()
            short = {"prompt": "Hello", "n_predict": 4, "cache_prompt": False}
            r = httpx.post(f"{url}/completion", json=short, timeout=120)
            waited = time.monotonic() - started
            assert r.status_code == 200
            # the abandoned request stopped within its next result wait (1 s), not after its 30000 tokens
            assert waited < 4.0, f"the next request waited {waited:.1f} s for the abandoned one"
            assert neighbour.is_alive()  # the neighbour was streaming all along
        finally:
            stop.set()
            neighbour.join(timeout=60)
