"""Patch 0009 (native/patches/0009-request-id-in-slots.patch): the ``X-Request-Id`` header of a
completion request is shown in ``GET /slots`` (``params.id_request``) of the slot that runs it,
on every generating route; the supervisor's no-progress watch and resend rule read it
(``orchestrator.supervise.calls``). Unpatched, ``/slots`` has no such field.
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


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("request-id") / "tiny.gguf", mode="echo", q=0.0, seed=0)


CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3000, "ignore_eos": True, "stream": True}
ROUTES = [
    ("/completion", {"prompt": "Hello world", "n_predict": 3000, "ignore_eos": True, "stream": True}),
    ("/v1/chat/completions", CHAT),
    ("/v1/messages", CHAT),
]


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=["completion", "chat", "messages"])
def test_the_request_id_header_is_shown_in_the_slot_that_runs_it(
    tiny_model: Path, path: str, body: dict[str, object]
) -> None:
    with running_server(tiny_model, "-np", "2", "-c", "8192", "-t", "1") as url:
        stop, seen = threading.Event(), []

        def stream() -> None:
            headers = {"X-Request-Id": "orc-test-42"}
            with httpx.stream("POST", url + path, json=body, headers=headers, timeout=120) as r:
                for _ in r.iter_raw():
                    if stop.is_set():
                        return

        worker = threading.Thread(target=stream, daemon=True)
        worker.start()
        try:
            deadline = time.monotonic() + 30
            while not seen and time.monotonic() < deadline:
                slots = httpx.get(url + "/slots", timeout=10).json()
                seen = [s for s in slots if s["is_processing"]]
                time.sleep(0.05)
            assert seen, "no slot took the request"
            assert seen[0]["params"]["id_request"] == "orc-test-42"
            idle = [s for s in slots if not s["is_processing"]]
            assert all(s.get("params", {}).get("id_request", "") == "" for s in idle)
        finally:
            stop.set()
            worker.join(timeout=30)
