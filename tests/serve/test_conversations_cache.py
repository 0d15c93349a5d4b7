"""Several conversations on one model: each keeps its own history, at ``parallel: 1`` and ``2``.

Two conversations share a long system prompt (two Claude Code sessions, an agent and its
subagent); before, the second took the slot holding the first (the longest shared prefix) and each
turn re-processed the other's history (668 of 1,379 tokens where 52 were new). Now every turn after
each one's first processes at most its new tokens + 64:

- at ``parallel: 2`` a conversation that shares only the start of an active one's slot takes an
  empty slot (``supervise/affinity.py``), and a side request (a title, with the same session) goes
  to the other slot too and leaves the main conversation's history alone;
- at ``parallel: 1`` the one slot is switched: llama-server saves the conversation a request would
  cut off in its host-memory prompt cache and loads the newcomer's own state from there (native
  patch 0008; upstream saved a slot only when over half of it would go).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]

SYSTEM = "You are a careful coding agent working in a large repository. " * 40
DETAIL = " The tokenizer drops the last line of every file it reads." * 4  # a first message's own tail


@pytest.fixture(scope="module", params=[1, 2], ids=["parallel-1", "parallel-2"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path
) -> Iterator[Stack]:
    parallel = request.param
    models = [{"name": "demo", "parallel": parallel, "ctx_size": 8192 * parallel, "threads": 1,
               "allow_ctx_beyond_trained": True}]  # fmt: skip
    s = real_stack(tmp_path_factory.mktemp("convs"), echo_model, bin_info, models=models)
    yield s
    s.close()


class Conversation:
    def __init__(self, stack: Stack, first: str, key: str | None = None) -> None:
        self.stack, self.key = stack, key
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": first + DETAIL},
        ]
        self.before: int | None = None  # prompt + answer tokens of the last turn

    def turn(self, next_user: str) -> tuple[int, int]:
        """One request; ``(processed, new)`` prompt tokens."""
        body: dict[str, Any] = {"model": "demo", "messages": self.messages, "max_tokens": 16, "temperature": 0}
        if self.key:
            body["prompt_cache_key"] = self.key
        r = httpx.post(self.stack.url + "/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        t = r.json()["timings"]
        total = t["prompt_n"] + t.get("cache_n", 0)
        new = total if self.before is None else max(0, total - self.before)
        self.before = total + t["predicted_n"]
        message = r.json()["choices"][0]["message"]
        answer = {"role": "assistant", "content": message.get("content") or ""}
        answer["reasoning_content"] = message.get("reasoning_content") or ""
        self.messages += [answer, {"role": "user", "content": next_user}]
        return t["prompt_n"], new


def test_two_conversations_sharing_a_system_prompt_keep_their_histories(stack: Stack) -> None:
    a, b = Conversation(stack, "Fix the parser bug"), Conversation(stack, "Write the release notes")
    rows = []
    for k in range(3):
        rows.append(("a", k, *a.turn(f"a: and then step {k}")))
        rows.append(("b", k, *b.turn(f"b: and then part {k}")))
    for who, k, processed, new in rows:
        if k > 0:
            assert processed <= new + 64, (who, k, processed, new, rows)


def test_more_conversations_than_slots_keep_their_histories(stack: Stack) -> None:
    """One conversation more than the model has slots: the slot a conversation finds taken is
    switched through llama-server's host-memory cache (patch 0008), at ``parallel: 1`` and ``2``."""
    parallel = stack.config.models[0].parallel
    convs = [Conversation(stack, f"Task {n}: migrate module {n} to the new API") for n in range(parallel + 1)]
    rows = []
    for k in range(3):
        for n, conv in enumerate(convs):
            rows.append((n, k, *conv.turn(f"{n}: and then step {k}")))
    for n, k, processed, new in rows:
        if k > 0:
            assert processed <= new + 64, (n, k, processed, new, rows)


def test_a_side_request_leaves_the_main_conversation_alone(stack: Stack) -> None:
    main = Conversation(stack, "Refactor the scheduler", key="session-1")
    main.turn("continue")
    main.turn("continue again")
    title = Conversation(stack, "Write a 5-word title for this conversation", key="session-1")
    title.turn("ok")
    processed, new = main.turn("and finish")
    assert processed <= new + 64, (processed, new)
    # /status shows the session's cache hits (orchestrator status prints them)
    rows = httpx.get(stack.url + "/status", timeout=30).json()["models"][0]["kv"]["sessions"]
    mine = next(r for r in rows if r["session"] == "k:session-1")
    assert mine["requests"] == 4
    assert mine["last"]["processed_tokens"] == processed
    assert mine["cached_tokens"] > mine["processed_tokens"]
