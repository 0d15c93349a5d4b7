"""An abandoned request through the endpoint: the client of a whole (non-streamed) answer goes away
while another slot streams, and its slot serves the next request within seconds (the proxy closes
the upstream request at once; native patch 0006 makes llama-server notice while the neighbour
works). Measured before: 11-25 s."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]

LONG = 30000  # tokens: a minute of decoding on one thread


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    models = [
        {"name": "demo", "parallel": 2, "ctx_size": 65536, "threads": 1, "allow_ctx_beyond_trained": True,
         "speculative": {"type": "none"}},
    ]  # fmt: skip
    s = real_stack(tmp_path_factory.mktemp("abandon"), echo_model, bin_info, models=models)
    yield s
    s.close()


def test_an_abandoned_whole_request_frees_its_slot_while_another_streams(stack: Stack) -> None:
    stop, chunks = threading.Event(), []

    def neighbour() -> None:
        body = {"model": "demo", "prompt": "Hello world", "max_tokens": LONG, "stream": True, "ignore_eos": True}
        with httpx.Client(timeout=120) as c, c.stream("POST", stack.url + "/v1/completions", json=body) as r:
            for _ in r.iter_raw():
                chunks.append(time.monotonic())
                if stop.is_set():
                    return

    streaming = threading.Thread(target=neighbour, daemon=True)
    streaming.start()
    try:
        deadline = time.monotonic() + 60
        while not chunks and time.monotonic() < deadline:
            time.sleep(0.05)
        assert chunks, "the neighbour stream never started"
        long = {"model": "demo", "prompt": "Hello world", "max_tokens": LONG, "ignore_eos": True}
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and disconnects
            httpx.post(stack.url + "/v1/completions", json=long, timeout=httpx.Timeout(1.5, connect=5.0))
        started = time.monotonic()
        r = httpx.post(
            stack.url + "/v1/completions", json={"model": "demo", "prompt": "Hi", "max_tokens": 4}, timeout=120
        )
        waited = time.monotonic() - started
        assert r.status_code == 200, r.text
        assert waited < 5.0, f"the next request waited {waited:.1f} s for the abandoned one"
        assert streaming.is_alive()  # the neighbour streamed all along
    finally:
        stop.set()
        streaming.join(timeout=60)
