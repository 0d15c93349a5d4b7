"""Patch 0011 (native/patches/0011-responses-whole-answer-timings.patch): a whole
``/v1/responses`` answer carries ``timings``, as its streamed ``response.completed`` event does,
so the proxy's draft-length policy can learn from non-streamed Responses requests.

The echo tiny model with q = 0 accepts every draft, so drafted tokens show the draft length
exactly.
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

BODY = {"model": "tiny", "max_output_tokens": 24, "temperature": 0.0, "input": "Hello"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    model = write_tiny_model(tmp_path_factory.mktemp("responses") / "tiny.gguf", mode="echo", q=0.0, seed=0)
    flags = ("--spec-type", "draft-mtp", "--spec-draft-n-max", "4", "--spec-draft-n-min", "0")
    with running_server(model, *flags) as url, httpx.Client(base_url=url, timeout=60.0) as client:
        yield client


def test_a_whole_response_carries_timings_and_its_draft_length(server: httpx.Client) -> None:
    resp = server.post("/v1/responses", json={**BODY, "speculative.n_max": 2})
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    timings = answer["timings"]
    assert timings["predicted_n"] == answer["usage"]["output_tokens"] > 4
    assert timings["draft_n"] == expected_drafts(timings["predicted_n"], 2, 0) > 0


def test_the_whole_and_the_streamed_timings_agree(server: httpx.Client) -> None:
    whole = server.post("/v1/responses", json={**BODY, "speculative.n_max": 1}).json()["timings"]
    completed: dict[str, Any] = {}
    with server.stream("POST", "/v1/responses", json={**BODY, "speculative.n_max": 1, "stream": True}) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: ") and '"response.completed"' in line:
                completed = json.loads(line[6:])
    streamed = completed["timings"]
    assert (whole["predicted_n"], whole["draft_n"]) == (streamed["predicted_n"], streamed["draft_n"])
