"""MTP speculative decoding against a real llama-server serving the tiny echo models.

Counts come from each response's ``timings.draft_n`` / ``timings.draft_n_accepted``. No speed
is asserted: on a tiny model a draft step costs as much as the whole model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.native

SPEC = ("--spec-type", "draft-mtp", "--spec-draft-n-min", "1")
PROMPT = "Hello world"


def spec_args(n_max: int) -> tuple[str, ...]:
    return (*SPEC, "--spec-draft-n-max", str(n_max))


def complete(server: Any, n_predict: int, prompt: str = PROMPT) -> dict[str, Any]:
    return server.post(
        "/completion",
        {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "return_tokens": True, "cache_prompt": False},
    )


def simulate_n_max_1(first: int, n_tokens: int, successor: Any, flagged: Any) -> tuple[int, int]:
    """(drafted, accepted) that the echo construction predicts for n_max = 1: each step drafts
    the token after the newest one; the draft is right unless that newest token is flagged."""
    cur, n, drafted, accepted = first, 1, 0, 0
    while n < n_tokens:
        drafted += 1
        if flagged[cur]:
            cur, n = int(successor[cur]), n + 1
        else:
            accepted += 1
            cur, n = int(successor[successor[cur]]), n + 2
    return drafted, accepted


def test_draft_mtp_drafts_and_accepts_everything_at_q0(llama_server: Any, echo_model: Path) -> None:
    server = llama_server(echo_model, *spec_args(3))
    for n_predict in (16, 64):
        t = complete(server, n_predict)["timings"]
        assert t["draft_n"] > 0
        assert t["draft_n_accepted"] == t["draft_n"], t
    chat = server.post(
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 24, "temperature": 0},
    )
    assert chat["timings"]["draft_n"] > 0
    assert chat["timings"]["draft_n_accepted"] == chat["timings"]["draft_n"]


def test_acceptance_is_one_minus_q(llama_server: Any, echo_model_q02: Path) -> None:
    from orchestrator.models.tiny import load_echo_map

    server = llama_server(echo_model_q02, *spec_args(1))
    res = complete(server, 800)
    t = res["timings"]
    drafted, accepted = t["draft_n"], t["draft_n_accepted"]
    assert drafted >= 200
    rate = accepted / drafted
    assert rate == pytest.approx(0.8, abs=0.05), (drafted, accepted)
    # the construction predicts the exact counts along this path (up to the last step)
    emap = load_echo_map(0.2, seed=0)
    want_drafted, want_accepted = simulate_n_max_1(res["tokens"][0], len(res["tokens"]), emap.successor, emap.flagged)
    assert abs(drafted - want_drafted) <= 2 and abs(accepted - want_accepted) <= 2, (
        drafted,
        accepted,
        want_drafted,
        want_accepted,
    )


def test_greedy_output_is_identical_with_and_without_speculation(llama_server: Any, echo_model_q02: Path) -> None:
    plain = llama_server(echo_model_q02)
    spec = llama_server(echo_model_q02, *spec_args(3))
    a, b = complete(plain, 96), complete(spec, 96)
    assert "draft_n" not in a["timings"]  # without --spec-type nothing is drafted
    assert b["timings"]["draft_n"] > b["timings"]["draft_n_accepted"] > 0  # some drafts were rejected
    assert a["tokens"] == b["tokens"]
    assert a["content"] == b["content"]
    body = {"messages": [{"role": "user", "content": "Count for me"}], "max_tokens": 48, "temperature": 0}
    ca, cb = plain.post("/v1/chat/completions", body), spec.post("/v1/chat/completions", body)
    assert ca["choices"][0]["message"] == cb["choices"][0]["message"]


@pytest.fixture(scope="module")
def separate_model(tiny_dir: Path, pinned_source: Path) -> Path:
    from orchestrator.models.tiny import write_tiny_model

    return write_tiny_model(tiny_dir / "separate-q0.gguf", mode="echo", q=0.0, variant="separate")


def assert_echo(tokens: list[int]) -> None:
    """Each generated token is the echo successor of the one before it."""
    from orchestrator.models.tiny import load_echo_map

    successor = load_echo_map(0.0).successor
    assert [int(successor[t]) for t in tokens[:-1]] == tokens[1:]


def test_separate_draft_file_serves_with_md(llama_server: Any, separate_model: Path) -> None:
    from orchestrator.models.tiny import draft_path

    server = llama_server(separate_model, "-md", str(draft_path(separate_model)), *spec_args(3))
    res = complete(server, 64)
    t = res["timings"]
    assert t["draft_n"] > 0 and t["draft_n_accepted"] == t["draft_n"]
    assert "loading draft model" in server.log()
    assert_echo(res["tokens"])


def test_separate_draft_type_is_inferred_from_the_draft_file(llama_server: Any, separate_model: Path) -> None:
    # common_speculative_types_from_gguf: a -md file whose last block has nextn.eh_proj -> draft-mtp
    from orchestrator.models.tiny import draft_path

    server = llama_server(separate_model, "-md", str(draft_path(separate_model)))
    t = complete(server, 32)["timings"]
    assert t["draft_n"] > 0 and t["draft_n_accepted"] == t["draft_n"]


def test_dense_variant_speculates(llama_server: Any, tiny_dir: Path, pinned_source: Path) -> None:
    from orchestrator.models.tiny import write_tiny_model

    dense = write_tiny_model(tiny_dir / "dense-q0.gguf", mode="echo", q=0.0, variant="dense")
    server = llama_server(dense, *spec_args(2))
    res = complete(server, 48)
    t = res["timings"]
    assert t["draft_n"] > 0 and t["draft_n_accepted"] == t["draft_n"]
    assert_echo(res["tokens"])
