"""Patch 0005 (native/patches/0005-anthropic-llama-fields-and-timings.patch): on the Anthropic
Messages route llama-server keeps llama.cpp's own request fields (``speculative.n_max``,
``id_slot``, ...) instead of dropping them in its conversion, and its answers, whole or streamed,
carry ``timings`` as the OpenAI answers do.

The echo tiny model with q = 0 accepts every draft, so drafted tokens show the draft length
exactly: none at K = 0, ``expected_drafts`` at K = 2.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from native.test_patches_draft_length import expected_drafts
from native_server import running_server

from orchestrator.models.tiny import write_tiny_model

pytestmark = [pytest.mark.native, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    model = write_tiny_model(tmp_path_factory.mktemp("anthropic") / "tiny.gguf", mode="echo", q=0.0, seed=0)
    flags = ("--spec-type", "draft-mtp", "--spec-draft-n-max", "4", "--spec-draft-n-min", "0", "-np", "2")
    with running_server(model, *flags) as url, httpx.Client(base_url=url, timeout=60.0) as client:
        yield client


def message(client: httpx.Client, **extra: Any) -> dict[str, Any]:
    body = {"model": "tiny", "max_tokens": 24, "temperature": 0.0, "messages": [{"role": "user", "content": "Hello"}]}
    resp = client.post("/v1/messages", json={**body, **extra})
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def test_a_message_carries_timings_and_its_draft_length(server: httpx.Client) -> None:
    off = message(server, **{"speculative.n_max": 0})
    two = message(server, **{"speculative.n_max": 2})
    assert off["timings"]["predicted_n"] == off["usage"]["output_tokens"] > 4
    assert off["timings"].get("draft_n", 0) == 0
    n = two["timings"]["predicted_n"]
    assert two["timings"]["draft_n"] == expected_drafts(n, 2, 0) > 0
    assert two["content"] == off["content"]  # the draft length never changes the text


def test_a_streamed_message_delta_carries_timings(server: httpx.Client) -> None:
    body = {"model": "tiny", "max_tokens": 24, "stream": True, "speculative.n_max": 1}
    body["messages"] = [{"role": "user", "content": "Hello"}]
    events = []
    with server.stream("POST", "/v1/messages", json=body) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    delta = next(e for e in events if e["type"] == "message_delta")
    assert delta["usage"]["output_tokens"] == delta["timings"]["predicted_n"]
    assert delta["timings"]["draft_n"] == expected_drafts(delta["timings"]["predicted_n"], 1, 0)
    assert events[-1]["type"] == "message_stop" and "timings" not in events[-1]


def test_id_slot_reaches_the_slot(server: httpx.Client) -> None:
    """The slot that served the last request holds the newest task id: each one named its slot."""
    for slot in (1, 0, 1):
        message(server, id_slot=slot, messages=[{"role": "user", "content": f"slot {slot} only"}])
        tasks = {s["id"]: s.get("id_task", -1) for s in server.get("/slots").json()}  # absent: never ran
        assert max(tasks, key=lambda sid: tasks[sid]) == slot, tasks
