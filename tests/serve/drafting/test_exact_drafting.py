"""Exact answers with MTP drafting on: every per-token field equals the same request with drafting off.

At the pin, llama-server fills per-token probabilities only for tokens the target model sampled
itself; tokens accepted from a draft come back with logprob 0 and no top candidates. The proxy
turns drafting off (``speculative.n_max: 0``) for requests that ask for them. One stack serves the
q = 0.2 echo model twice: ``demo`` with drafting (n_max 3) and ``nodraft`` without speculation
(the reference). Per-token fields at the pin: chat ``logprobs``/``top_logprobs``,
``/v1/completions`` ``logprobs: N``, and the native ``n_probs`` (with ``post_sampling_probs``),
each streamed and not. ``/infill`` takes ``n_probs`` too; the tiny model has no FIM tokens, so
there only the body sent upstream is checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]

TOL = 1e-3  # float noise between a batched verify step and one-token decode
PROMPT = [{"role": "user", "content": "Tell me a story about a dragon."}]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model_q02: Path) -> Iterator[Stack]:
    common = {"parallel": 1, "ctx_size": 2048, "thinking": False, "threads": 1}
    models = [
        {"name": "demo", **common, "speculative": {"type": "draft-mtp", "n_max": 3, "n_min": 1}},
        {"name": "nodraft", **common, "speculative": {"type": "none"}},
    ]
    s = real_stack(tmp_path_factory.mktemp("exact"), echo_model_q02, bin_info, models=models)
    yield s
    s.close()


def call(url: str, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST and return the per-token entries (``logprobs.content``), streamed or not."""
    r = httpx.post(url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    if not body.get("stream"):
        return list(r.json()["choices"][0]["logprobs"]["content"])
    tokens: list[dict[str, Any]] = []
    for event in r.text.split("\n\n"):
        if event.startswith("data: {"):
            chunk = json.loads(event[len("data: ") :])
            for choice in chunk.get("choices", []):
                tokens.extend((choice.get("logprobs") or {}).get("content") or [])
    return tokens


def value(entry: dict[str, Any]) -> float:
    return float(entry["logprob"] if "logprob" in entry else entry["prob"])


def assert_same(got: list[dict[str, Any]], ref: list[dict[str, Any]], n: int) -> None:
    assert [t["token"] for t in got] == [t["token"] for t in ref]
    for g, r in zip(got, ref, strict=True):
        assert abs(value(g) - value(r)) <= TOL, (g, r)
        top_g = g.get("top_logprobs", g.get("top_probs"))
        top_r = r.get("top_logprobs", r.get("top_probs"))
        assert len(top_g) == len(top_r) and 0 < len(top_g) <= n, (g, r)  # complete: candidates for every token
        assert [t["token"] for t in top_g] == [t["token"] for t in top_r]
        for a, b in zip(top_g, top_r, strict=True):
            assert abs(value(a) - value(b)) <= TOL


FIELDS = [
    ("/v1/chat/completions", {"messages": PROMPT, "logprobs": True, "top_logprobs": 3}, 3),
    ("/v1/completions", {"prompt": "Once upon a time", "logprobs": 3}, 3),
    ("/v1/completions", {"prompt": "Once upon a time", "n_probs": 3}, 3),
    ("/v1/completions", {"prompt": "Once upon a time", "n_probs": 3, "post_sampling_probs": True}, 3),
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("path", "fields", "n"), FIELDS, ids=["chat", "cmpl-logprobs", "n_probs", "post_sampling"])
def test_per_token_fields_equal_drafting_off(
    stack: Stack, path: str, fields: dict[str, Any], n: int, stream: bool
) -> None:
    body = {**fields, "max_tokens": 24, "temperature": 0, "stream": stream}
    ref = call(stack.url, path, {**body, "model": "nodraft"})
    got = call(stack.url, path, {**body, "model": "demo"})
    assert len(ref) == 24
    assert_same(got, ref, n)
    sent = stack.recorder.bodies(path)[-1]
    assert sent["speculative.n_max"] == 0


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    ("path", "zero", "one"),
    [
        ("/v1/chat/completions", {"messages": PROMPT, "logprobs": True, "top_logprobs": 0}, {"top_logprobs": 1}),
        ("/v1/completions", {"prompt": "Once upon a time", "logprobs": 0}, {"logprobs": 1}),
    ],
    ids=["chat", "completions"],
)
def test_zero_candidates_still_give_each_tokens_logprob(
    stack: Stack, path: str, zero: dict[str, Any], one: dict[str, Any], stream: bool
) -> None:
    """llama-server answers no log probabilities at all for zero candidates; the proxy gives each
    token's own, with empty candidate lists, equal to drafting off."""
    body = {**zero, "max_tokens": 24, "temperature": 0, "stream": stream}
    got = call(stack.url, path, {**body, "model": "demo"})
    ref = call(stack.url, path, {**body, **one, "model": "nodraft"})
    assert len(got) == len(ref) == 24
    assert [t["token"] for t in got] == [t["token"] for t in ref]
    for g, r in zip(got, ref, strict=True):
        assert g["top_logprobs"] == [] and abs(value(g) - value(r)) <= TOL


def test_the_fault_exists_without_the_proxy(stack: Stack) -> None:
    """Straight to the drafting replica, accepted draft tokens lose their candidates: what the proxy prevents."""
    [inst] = stack.supervisor.for_model("demo")
    body = {"messages": PROMPT, "logprobs": True, "top_logprobs": 3, "max_tokens": 24, "temperature": 0}
    direct = call(inst.base_url or "", "/v1/chat/completions", body)
    assert any(t["top_logprobs"] == [] for t in direct)


def test_drafting_stays_on_otherwise_and_is_counted(stack: Stack) -> None:
    before = _metric(stack, 'orchestrator_drafting_off_total{model="demo",reason="token_probs"}')
    r = httpx.post(
        stack.url + "/v1/chat/completions",
        json={"model": "demo", "messages": PROMPT, "max_tokens": 24, "temperature": 0},
        timeout=60,
    ).json()
    assert r["timings"]["draft_n"] > 0
    call(stack.url, "/v1/chat/completions", {"model": "demo", "messages": PROMPT, "logprobs": True, "max_tokens": 4})
    assert _metric(stack, 'orchestrator_drafting_off_total{model="demo",reason="token_probs"}') == before + 1


def test_infill_with_n_probs_goes_without_drafting(stack: Stack) -> None:
    stack.recorder.clear()
    r = httpx.post(
        stack.url + "/infill",
        json={"model": "demo", "input_prefix": "def f(", "input_suffix": "):", "n_probs": 2, "n_predict": 4},
    )
    assert r.status_code == 400  # the tiny model has no FIM tokens; llama-server says so (its 501)
    assert stack.recorder.bodies("/infill")[0]["speculative.n_max"] == 0


def _metric(stack: Stack, series: str) -> float:
    for line in httpx.get(stack.url + "/metrics").text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
