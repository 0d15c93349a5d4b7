"""A clock in the system prompt (case B76), through the endpoint on a real llama-server.

A timestamp line that changes on every request (opencode memory plugins, many custom agents)
breaks the prompt cache from that line on. With ``cache.stable_system: true`` the line moves to a
``<system-reminder>`` note at the end of the last user turn, and each turn of a multi-turn session
reuses >= 95 % of its prompt on chat, Messages and Responses. Without it, ``/status`` names the
session and the line that broke its cache. ``scripts``-free figures: run this module with ``-s``
and it prints each turn's reuse.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]

# the clock near the top of the system prompt, as memory plugins put it: P, the line, S0 (the
# agent's instructions, about 3,000 tokens: a small agent prompt; a turn's own tokens are a few
# percent of it)
P = "You are a coding agent."
S0 = "Read the repository before you change it. Keep each change small and tested. " * 200
STAMPS = [f"2026-09-14T10:00:{8 * turn + 1:02d}.{123 * (turn + 1):03d}Z" for turn in range(4)]


def stamps(api: str, model: str) -> list[str]:
    """A session's clock, one reading per turn: sessions never share a reading (a prompt another
    session cached would be reused, llama-server's host-memory prompt cache holds them all)."""
    hour = 10 + sorted(APIS).index(api) + 3 * (model == "plain")
    return [stamp.replace("T10:", f"T{hour:02d}:") for stamp in STAMPS]


ANTHROPIC = {"anthropic-version": "2023-06-01"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    base = {"parallel": 1, "ctx_size": 8192, "threads": 1, "allow_ctx_beyond_trained": True}
    models = [{"name": "demo", **base, "cache": {"stable_system": True}}, {"name": "plain", **base}]
    s = real_stack(tmp_path_factory.mktemp("clock"), echo_model, bin_info, models=models)
    yield s
    s.close()


def _system(stamp: str) -> str:
    return f"{P}\n<memory_metadata>updated {stamp}</memory_metadata>\n{S0}"


def _chat_turn(stack: Stack, model: str, stamp: str, history: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    messages = [{"role": "system", "content": _system(stamp)}, *history]
    body = {"model": model, "messages": messages, "max_tokens": 8, "temperature": 0,
            "chat_template_kwargs": {"enable_thinking": False}}  # fmt: skip
    r = httpx.post(stack.url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"], r.json()["timings"]


def _messages_turn(stack: Stack, model: str, stamp: str, history: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    body = {"model": model, "max_tokens": 8, "temperature": 0, "thinking": {"type": "disabled"},
            "system": [{"type": "text", "text": _system(stamp)}], "messages": history}  # fmt: skip
    r = httpx.post(stack.url + "/v1/messages", json=body, headers=ANTHROPIC, timeout=120)
    assert r.status_code == 200, r.text
    return "".join(b.get("text", "") for b in r.json()["content"]), r.json()["timings"]


def _responses_turn(stack: Stack, model: str, stamp: str, history: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    instructions = f"{P}\nCurrent date and time: {stamp[:10]} {stamp[11:19]}\n{S0}"
    body = {"model": model, "max_output_tokens": 8, "temperature": 0, "reasoning": {"effort": "none"},
            "instructions": instructions, "input": history}  # fmt: skip
    r = httpx.post(stack.url + "/v1/responses", json=body, timeout=120)
    assert r.status_code == 200, r.text
    out = r.json()["output"]
    text = "".join(p.get("text", "") for i in out if i.get("type") == "message" for p in i["content"])
    usage = r.json()["usage"]
    cached = usage["input_tokens_details"]["cached_tokens"]
    return text, {"cache_n": cached, "prompt_n": usage["input_tokens"] - cached}


Turn = Callable[[Stack, str, str, list[dict[str, Any]]], tuple[str, dict[str, Any]]]
APIS: dict[str, Turn] = {"chat": _chat_turn, "messages": _messages_turn, "responses": _responses_turn}


def session(stack: Stack, model: str, api: str, turns: int = 4) -> list[float]:
    """A session of ``turns`` requests (each with the clock moved on); each later turn's reuse:
    cached / (cached + processed) prompt tokens."""
    history: list[dict[str, Any]] = [{"role": "user", "content": f"U1 of {api} on {model}"}]
    reuse = []
    for turn, stamp in enumerate(stamps(api, model)[:turns]):
        answer, timings = APIS[api](stack, model, stamp, history)
        if turn:
            reuse.append(timings["cache_n"] / (timings["cache_n"] + timings["prompt_n"]))
        history += [{"role": "assistant", "content": answer}, {"role": "user", "content": f"U{turn + 2}"}]
    print(f"{api} {model}: reuse per turn {[round(r, 3) for r in reuse]}", flush=True)
    return reuse


@pytest.mark.parametrize("api", list(APIS))
def test_a_moved_clock_keeps_each_turn_cached(stack: Stack, api: str) -> None:
    reuse = session(stack, "demo", api)
    assert min(reuse) >= 0.95, reuse


@pytest.mark.parametrize("api", list(APIS))
def test_without_it_the_clock_breaks_the_cache_and_status_names_the_line(stack: Stack, api: str) -> None:
    reuse = session(stack, "plain", api)
    assert max(reuse) < 0.9, reuse  # everything after the clock line, processed again
    models = httpx.get(stack.url + "/status").json()["models"]
    rows = next(m for m in models if m["model"] == "plain")["kv"]["sessions"]
    broken = rows[0]["cache_broken_by"]
    last = stamps(api, "plain")[-1]
    clock = f"Current date and time: {last[:10]} {last[11:19]}" if api == "responses" else None
    assert broken["line"] == (clock or f"<memory_metadata>updated {last}</memory_metadata>")
    assert broken["line_number"] == 2 and broken["times"] == 3


def test_what_the_model_sees(stack: Stack) -> None:
    """The system prompt without the line; the line at the end of the last user turn."""
    history = [{"role": "user", "content": "U1"}]
    body = {"model": "demo", "messages": [{"role": "system", "content": _system(STAMPS[0])}, *history],
            "chat_template_kwargs": {"enable_thinking": False}}  # fmt: skip
    r = httpx.post(stack.url + "/apply-template", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["prompt"].endswith(
        f"{P}\n{S0.strip()}<|im_end|>\n<|im_start|>user\nU1\n\n<system-reminder>\n"
        f"<memory_metadata>updated {STAMPS[0]}</memory_metadata>\n</system-reminder><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
