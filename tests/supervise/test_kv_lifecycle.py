"""Prompt-cache persistence through the model lifecycle and the proxy (real llama-servers, tiny model):

- ``POST /models/unload`` saves the slot, ``POST /models/load`` restores it before the model is
  ready, and the next request with the same prefix reports it cached (``timings.cache_n``);
  ``/status`` and ``/metrics`` count it;
- a warm prefix (a long system message) is prefilled at load, so the first chat request with it
  has a short prefill;
- with two slots and two long prefixes, each chat request goes to the slot holding its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from kv_helpers import long_text
from scheduler_helpers import lifecycle_stack, tiny_models

pytestmark = [pytest.mark.slow, pytest.mark.native]


@pytest.fixture(autouse=True)
def _own_kv_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Saved slots of other tests (same tiny model, same flags) would be restored here too."""
    monkeypatch.setenv("ORCHESTRATOR_KV", str(tmp_path / "kv"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, pinned_source: Path) -> list[Path]:
    return tiny_models(tmp_path_factory.mktemp("kvlife"), 1)


def _post(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(url + path, json=body, timeout=300)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def _kv(url: str, model: str) -> dict[str, Any]:
    rows = httpx.get(url + "/status", timeout=30).json()["models"]
    kv: dict[str, Any] = next(r for r in rows if r["model"] == model)["kv"]
    return kv


def test_unload_then_load_restores_the_slot(tmp_path: Path, bin_info: Any, tiny: list[Path]) -> None:
    stack = lifecycle_stack(tmp_path, bin_info, [{"name": "a", "path": str(tiny[0]), "ctx_size": 4096}])
    try:
        prefix = long_text("doc")
        first = _post(stack.url, "/v1/completions", {"model": "a", "prompt": prefix, "max_tokens": 1})
        n_prefix = first["timings"]["prompt_n"]
        assert n_prefix >= 1500
        _post(stack.url, "/models/unload", {"model": "a"})
        assert _kv(stack.url, "a")["saved"] == 1
        _post(stack.url, "/models/load", {"model": "a"})
        kv = _kv(stack.url, "a")
        assert (kv["restored"], kv["verify_failures"], kv["enabled"], kv["warning"]) == (1, 0, True, None)
        body = {"model": "a", "prompt": prefix + " and the question", "max_tokens": 1}
        again = _post(stack.url, "/v1/completions", body)
        assert again["timings"]["cache_n"] >= n_prefix, again["timings"]
        metrics = httpx.get(stack.url + "/metrics", timeout=30).text
        assert 'orchestrator_kv_restored_slots_total{model="a"} 1.0' in metrics
        assert 'orchestrator_prompt_cached_tokens_count{model="a"}' in metrics
    finally:
        stack.close()


def test_a_warm_prefix_makes_the_first_prefill_short(tmp_path: Path, bin_info: Any, tiny: list[Path]) -> None:
    system = long_text("rule")
    model = {"name": "w", "path": str(tiny[0]), "ctx_size": 4096, "warm_prefixes": [system]}
    stack = lifecycle_stack(tmp_path, bin_info, [model])
    try:
        _post(stack.url, "/models/load", {"model": "w"})
        assert _kv(stack.url, "w")["warmed"] == 1
        body = {
            "model": "w",
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": "what is rule7?"}],
            "max_tokens": 1,
            "temperature": 0,
        }
        answer = _post(stack.url, "/v1/chat/completions", body)
        assert answer["timings"]["cache_n"] >= 1500, answer["timings"]
        assert answer["timings"]["prompt_n"] < 40, answer["timings"]
    finally:
        stack.close()


def test_two_slots_two_prefixes_each_request_goes_to_its_slot(tmp_path: Path, bin_info: Any, tiny: list[Path]) -> None:
    prefixes = [long_text("alpha"), long_text("omega")]
    model = {"name": "p", "path": str(tiny[0]), "ctx_size": 8192, "parallel": 2, "warm_prefixes": prefixes}
    stack = lifecycle_stack(tmp_path, bin_info, [model])
    try:
        _post(stack.url, "/models/load", {"model": "p"})
        assert _kv(stack.url, "p")["warmed"] == 2
        stack.recorder.clear()
        cached = []
        for turn in range(2):
            for which in (1, 0):
                messages = [
                    {"role": "system", "content": prefixes[which]},
                    {"role": "user", "content": f"question {turn}"},
                ]
                body = {"model": "p", "messages": messages, "max_tokens": 1, "temperature": 0}
                cached.append((turn, which, _post(stack.url, "/v1/chat/completions", body)["timings"]["cache_n"]))
        slots = [b["id_slot"] for b in stack.recorder.bodies()]
        assert slots == [1, 0, 1, 0]
        assert all(n >= 1500 for turn, _, n in cached if turn == 0), cached
    finally:
        stack.close()


def _turns(url: str, model: str, n: int, unload_before: int | None, tag: str) -> list[dict[str, Any]]:
    """A chat session ``tag`` of ``n`` turns (a long system message, long user messages, each answer
    sent back as the next turn's history); the model is unloaded and loaded before turn ``unload_before``."""
    messages: list[dict[str, str]] = [{"role": "system", "content": long_text(tag, 150)}]
    out = []
    for turn in range(1, n + 1):
        if turn == unload_before:
            _post(url, "/models/unload", {"model": model})
            _post(url, "/models/load", {"model": model})
        messages.append({"role": "user", "content": long_text(f"q{turn}x", 50)})
        body = {"model": model, "messages": messages, "max_tokens": 24, "temperature": 0}
        answer = _post(url, "/v1/chat/completions", body)
        messages.append({"role": "assistant", "content": answer["choices"][0]["message"]["content"]})
        out.append(answer)
    return out


def test_a_session_unloaded_mid_way_resumes_from_the_restored_checkpoint(
    tmp_path: Path, bin_info: Any, tiny: list[Path]
) -> None:
    """Each turn re-renders the previous answer, so it does not extend the saved slot: a hybrid
    model needs the restored context checkpoints (native patch 0003) to reuse the prompt. Turn 4,
    live and after an unload, processes at most its new tokens + 64 (patch 0004's checkpoint 16
    tokens before each prompt's end: the tiny vocabulary splits ``<think>``, and the proxy drops
    the echo model's empty answers), and repeating a request after unload + load is served from
    the restored slot."""
    stack = lifecycle_stack(tmp_path, bin_info, [{"name": "a", "path": str(tiny[0]), "ctx_size": 4096}])
    try:
        # a document shorter than the session below: at the session's reload, the longest wins
        body = {"model": "a", "prompt": long_text("doc", 200), "max_tokens": 8, "temperature": 0}
        first = _post(stack.url, "/v1/completions", body)
        _post(stack.url, "/models/unload", {"model": "a"})
        _post(stack.url, "/models/load", {"model": "a"})
        again = _post(stack.url, "/v1/completions", body)
        assert again["timings"]["prompt_n"] <= 64, again["timings"]
        assert again["choices"][0]["text"] == first["choices"][0]["text"]
        live = _turns(stack.url, "a", 4, unload_before=None, tag="live")
        swapped = _turns(stack.url, "a", 4, unload_before=4, tag="swap")
        kv = _kv(stack.url, "a")
        assert (kv["restored"], kv["enabled"], kv["warning"]) == (2, True, None), kv
        assert kv["checkpoints"] >= 2, kv
        # the same shape of session: turn 4 after the swap reuses as much as the live server's
        assert [t["usage"]["prompt_tokens"] for t in swapped] == [t["usage"]["prompt_tokens"] for t in live]
        new = live[3]["usage"]["prompt_tokens"] - live[2]["usage"]["prompt_tokens"]
        assert live[3]["timings"]["prompt_n"] <= new + 64, (new, live[3]["timings"])  # patch 0004
        assert swapped[3]["timings"]["prompt_n"] <= new + 64, (new, swapped[3]["timings"])
    finally:
        stack.close()
