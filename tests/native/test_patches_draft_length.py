"""Patch 0002 (native/patches/0002-per-request-draft-length.patch): one llama-server
launched with ``--spec-draft-n-max 4`` serves per-request ``speculative.n_max`` /
``speculative.n_min``, clamps them to the launch value, and reports the effective values.

The echo tiny model with q = 0 accepts every draft, so the number of drafted tokens is
exact arithmetic (``expected_drafts``), and the text never depends on the draft length.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from native_server import running_server

from orchestrator.models.tiny import write_tiny_model

pytestmark = [pytest.mark.native, pytest.mark.slow]

LAUNCH_N_MAX = 4


def expected_drafts(n_predict: int, n_max: int, n_min: int) -> int:
    """Drafted tokens when every draft is accepted: after the first sampled token, each step
    drafts min(n_max, tokens left - 1) tokens (llama-server's get_n_draft_max), none when
    that is below n_min, and emits the drafts plus one sampled token."""
    generated, drafted = 1, 0
    while generated < n_predict:
        d = min(n_max, n_predict - generated - 1)
        d = 0 if d < n_min else d
        generated += d + 1
        drafted += d
    return drafted


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    model = write_tiny_model(tmp_path_factory.mktemp("draftlen") / "tiny.gguf", mode="echo", q=0.0, seed=0)
    flags = ("--spec-type", "draft-mtp", "--spec-draft-n-max", str(LAUNCH_N_MAX), "--spec-draft-n-min", "0")
    with running_server(model, *flags) as url, httpx.Client(base_url=url, timeout=60.0) as client:
        yield client


def complete(client: httpx.Client, n_predict: int, **spec: int) -> dict[str, Any]:
    body = {"prompt": "Hello world", "n_predict": n_predict, "temperature": 0.0, "cache_prompt": False}
    body.update({f"speculative.{k}": v for k, v in spec.items()})
    resp = client.post("/completion", json=body)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


@pytest.mark.parametrize(("requested", "effective"), [(1, 1), (2, 2), (4, 4), (8, LAUNCH_N_MAX)])
def test_request_n_max_sets_the_draft_length(server: httpx.Client, requested: int, effective: int) -> None:
    baseline = complete(server, 32, n_max=0)
    out = complete(server, 32, n_max=requested)
    assert out["generation_settings"]["speculative.n_max"] == effective
    assert out["timings"]["draft_n"] == expected_drafts(32, effective, 0)
    assert out["timings"]["draft_n_accepted"] == out["timings"]["draft_n"]
    assert out["content"] == baseline["content"]


def test_n_max_zero_turns_drafting_off(server: httpx.Client) -> None:
    out = complete(server, 32, n_max=0)
    assert out["generation_settings"]["speculative.n_max"] == 0
    assert out["timings"].get("draft_n", 0) == 0


def test_default_is_the_launch_n_max(server: httpx.Client) -> None:
    out = complete(server, 32)
    assert out["generation_settings"]["speculative.n_max"] == LAUNCH_N_MAX
    assert out["generation_settings"]["speculative.n_min"] == 0
    assert out["timings"]["draft_n"] == expected_drafts(32, LAUNCH_N_MAX, 0)


def test_request_n_min_drops_short_drafts(server: httpx.Client) -> None:
    # 34 tokens: the last step has room for 2 draft tokens, which n_min 3 forbids
    assert expected_drafts(34, 4, 0) != expected_drafts(34, 4, 3)
    loose = complete(server, 34, n_min=0)
    strict = complete(server, 34, n_min=3)
    assert strict["generation_settings"]["speculative.n_min"] == 3
    assert loose["timings"]["draft_n"] == expected_drafts(34, 4, 0)
    assert strict["timings"]["draft_n"] == expected_drafts(34, 4, 3)
    assert strict["content"] == loose["content"]


def test_n_min_is_clamped_to_n_max(server: httpx.Client) -> None:
    out = complete(server, 32, n_max=2, n_min=3)
    assert out["generation_settings"]["speculative.n_min"] == 2


def test_negative_n_max_is_a_400(server: httpx.Client) -> None:
    resp = server.post("/completion", json={"prompt": "x", "n_predict": 1, "speculative.n_max": -1})
    assert resp.status_code == 400
    assert "speculative.n_max" in resp.json()["error"]["message"]
