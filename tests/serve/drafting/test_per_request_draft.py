"""Per-request draft length (native patch 0002) on a real llama-server with the q = 0 echo model.

One server launched with ``--spec-draft-n-max 4``; requests ask for n_max 1, 2 and 4 (and 8,
which is clamped to 4). Every draft of the q = 0 echo model is right, so tokens per
verification step must be n_max + 1 up to the end-of-generation effect, which
``bench_stats.perfect_draft_counts`` computes exactly.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.bench.plan import has_patch
from orchestrator.bench.requests import reported_n_max
from orchestrator.bench.stats import perfect_draft_counts, tokens_per_step

N_PREDICT = 128
LAUNCH_N_MAX = 4


@pytest.fixture
def patched(bin_info: Any) -> None:
    if not has_patch(bin_info.manifest):
        pytest.skip(
            "the native build's manifest lacks 0002-per-request-draft-length.patch "
            "(run `orchestrator build` to build with native/patches)"
        )


@pytest.mark.native
@pytest.mark.usefixtures("patched")
def test_request_n_max_sets_tokens_per_step(llama_server: Any, echo_model: Any) -> None:
    server = llama_server(
        echo_model, "--spec-type", "draft-mtp", "--spec-draft-n-max", str(LAUNCH_N_MAX), "--spec-draft-n-min", "1"
    )
    texts = set()
    for n_max, effective in ((1, 1), (2, 2), (4, 4), (8, LAUNCH_N_MAX)):
        body = {
            "prompt": "Hello",
            "n_predict": N_PREDICT,
            "temperature": 0.0,
            "cache_prompt": False,
            "speculative.n_max": n_max,
        }
        answer = server.post("/completion", body)
        timings = answer["timings"]
        assert reported_n_max(answer["generation_settings"]) == effective
        assert timings["predicted_n"] == N_PREDICT
        steps, accepted = perfect_draft_counts(N_PREDICT, effective)
        # q = 0: every drafted token is accepted, and exactly as many as the rule allows
        assert timings["draft_n"] == timings["draft_n_accepted"] == accepted
        tps = tokens_per_step(timings["predicted_n"], timings["draft_n_accepted"])
        assert tps == N_PREDICT / steps
        assert abs(tps - (effective + 1)) < 0.3, tps  # n_max + 1 (1.97, 2.91, 4.74 at 128 tokens)
        texts.add(answer["content"])
    assert len(texts) == 1  # the draft length never changes greedy output


@pytest.mark.native
@pytest.mark.usefixtures("patched")
def test_request_n_max_zero_and_n_min(llama_server: Any, echo_model: Any) -> None:
    server = llama_server(
        echo_model, "--spec-type", "draft-mtp", "--spec-draft-n-max", str(LAUNCH_N_MAX), "--spec-draft-n-min", "1"
    )
    off = server.post("/completion", {"prompt": "Hello", "n_predict": 32, "temperature": 0.0, "speculative.n_max": 0})
    assert off["timings"].get("draft_n", 0) == 0 and off["timings"]["predicted_n"] == 32
    # n_min 3 with n_max 3: the last short drafts (fewer than 3 tokens of room) are dropped
    body = {"prompt": "Hello", "n_predict": 32, "temperature": 0.0, "speculative.n_max": 3, "speculative.n_min": 3}
    answer = server.post("/completion", body)
    assert answer["generation_settings"]["speculative.n_min"] == 3
    drafted = answer["timings"]["draft_n"]
    assert drafted % 3 == 0 and drafted == answer["timings"]["draft_n_accepted"]
    assert answer["content"] == off["content"]
