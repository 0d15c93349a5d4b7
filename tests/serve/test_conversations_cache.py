"""Several conversations on one model: each keeps its own history in its own slot.

Two conversations share a long system prompt (two Claude Code sessions, an agent and its
subagent); before, the second took the slot holding the first (the longest shared prefix) and each
turn re-processed the other's history (668 of 1,379 tokens where 52 were new). Now a conversation
that shares only the start of an active one's slot takes an empty slot, so at ``parallel: 2`` every
turn after each one's first processes at most its new tokens + 64; a side request (a title, with the
same session) goes to the other slot too and leaves the main conversation's history alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.server, pytest.mark.slow]

SYSTEM = "You are a careful coding agent working in a large repository. " * 40


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    models = [{"name": "demo", "parallel": 2, "ctx_size": 16384, "threads": 2, "allow_ctx_beyond_trained": True}]
    s = real_stack(tmp_path_factory.mktemp("convs"), echo_model, bin_info, models=models)
    yield s
    s.close()


class Conversation:
    def __init__(self, stack: Stack, first: str, key: str | None = None) -> None:
        self.stack, self.key = stack, key
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": first},
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


def test_two_conversations_sharing_a_system_prompt_keep_their_slots(stack: Stack) -> None:
    a, b = Conversation(stack, "Fix the parser bug"), Conversation(stack, "Write the release notes")
    rows = []
    for k in range(3):
        rows.append(("a", k, *a.turn(f"a: and then step {k}")))
        rows.append(("b", k, *b.turn(f"b: and then part {k}")))
    for who, k, processed, new in rows:
        if k > 0:
            assert processed <= new + 64, (who, k, processed, new, rows)


def test_a_side_request_leaves_the_main_conversation_alone(stack: Stack) -> None:
    main = Conversation(stack, "Refactor the scheduler", key="session-1")
    main.turn("continue")
    main.turn("continue again")
    title = Conversation(stack, "Write a 5-word title for this conversation", key="session-1")
    title.turn("ok")
    processed, new = main.turn("and finish")
    assert processed <= new + 64, (processed, new)
