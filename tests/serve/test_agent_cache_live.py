"""The recorded agent sessions replayed through the proxy against a real llama-server: on every turn
after the first, the processed prompt tokens (read from each API's usage: Anthropic
``cache_read_input_tokens``, Responses ``input_tokens_details.cached_tokens``, chat
``prompt_tokens_details.cached_tokens``) are at most the turn's new tokens plus 64, with the
draft length chosen per request (``speculative.adaptive``) on every turn.

``orchestrator bench agent`` (``scripts/bench_agent.py``) replays the same recordings as whole
sessions (``replay/REC``) and builds session scenarios from them, before and after, with TTFT and
the longest silence.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]

DATA = Path(__file__).resolve().parents[1] / "data" / "agent_sessions"
SLACK = 64  # tokens: llama-server resumes from its last checkpoint near the end of the previous prompt


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    model = {"name": "demo", "parallel": 1, "ctx_size": 32768, "allow_ctx_beyond_trained": True, "thinking": False}
    # adaptive: each turn also gets its own draft length (the policy on the request path), which
    # must not cost the prompt cache anything
    model["speculative"] = {"type": "draft-mtp", "n_max": 3, "adaptive": True}
    s = real_stack(tmp_path_factory.mktemp("agent-cache"), echo_model, bin_info, models=[{**model, "threads": 1}])
    yield s
    s.close()


def _usage(route: str, body: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, cached prompt tokens) of a whole answer."""
    usage = body["usage"]
    if route == "/v1/messages":
        return usage["input_tokens"] + usage["cache_read_input_tokens"], usage["cache_read_input_tokens"]
    if route == "/v1/responses":
        return usage["input_tokens"], usage["input_tokens_details"]["cached_tokens"]
    return usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


@pytest.mark.parametrize("name", ["claude_code_reminder", "codex", "opencode"])
def test_every_turn_processes_only_its_new_tokens(stack: Stack, name: str) -> None:
    session = json.loads((DATA / f"{name}.json").read_text())
    route = session["route"]
    [inst] = stack.supervisor.for_model("demo")
    httpx.post(f"{inst.base_url}/slots/0?action=erase", timeout=60)  # no other session's cache
    previous = None
    since = time.time()  # the policy's rows of this session only (others' rows share ``recent``)
    for n, body in enumerate(session["requests"], start=1):
        body = {**body, "stream": False}
        body["max_output_tokens" if route == "/v1/responses" else "max_tokens"] = 4
        r = httpx.post(stack.url + route, json=body, headers={"x-api-key": "none"}, timeout=600)
        assert r.status_code == 200, (n, r.text[:500])
        total, cached = _usage(route, r.json())
        if previous is not None:
            new = total - previous
            assert total - cached <= new + SLACK, f"turn {n}: processed {total - cached} of {total}, new {new}"
        previous = total
    recent = httpx.get(stack.url + "/status", timeout=30).json()["draft_policy"]["demo"]["recent"]
    # every whole answer taught the draft-length policy (Responses: native patch 0011's timings)
    learned = [r for r in recent if r["at"] >= since and "tokens_per_second" in r]
    assert len(learned) >= min(len(session["requests"]), 50), recent[:3]
