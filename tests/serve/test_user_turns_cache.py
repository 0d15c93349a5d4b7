"""A user turn after a tool chain pays only for its new tokens, through the real endpoint.

The Qwen3.5 template renders the assistant turns before the last user message without their
reasoning, so a new user message used to re-render the whole tool chain before it (813 of 1,306
prompt tokens re-processed on this model). With the cache-stable template (``preserve_thinking``,
the default where the template allows it) the turn processes at most its new tokens + 64, with
the reasoning sent back or dropped, on chat and Messages; ``preserve_thinking: false`` shows the
old cost.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]

SYSTEM = "You are a coding agent. Follow the repository's conventions. " * 30
TOOL_OUTPUT = "def main():\n    print('hello')\n" * 60
MODEL = "demo"  # the model the per-API tests run on (test_without_... uses "stock")
TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    base = {"parallel": 1, "ctx_size": 8192, "threads": 1, "allow_ctx_beyond_trained": True}
    models = [{"name": "demo", **base}, {"name": "stock", **base, "preserve_thinking": False}]
    s = real_stack(tmp_path_factory.mktemp("turns"), echo_model, bin_info, models=models)
    yield s
    s.close()


def _chat(
    stack: Stack, model: str, messages: list[dict[str, Any]], thinking: bool = True
) -> tuple[dict[str, Any], dict[str, Any]]:
    body = {"model": model, "messages": messages, "tools": TOOLS, "max_tokens": 24, "temperature": 0}
    if not thinking:
        body["chat_template_kwargs"] = {"enable_thinking": False}
    r = httpx.post(stack.url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"], r.json()["timings"]


def _session(stack: Stack, model: str, *, send_reasoning: bool, thinking: bool = True) -> tuple[int, int]:
    """A tool chain, then a new user message: ``(processed, new)`` tokens of that last request."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Fix main.py"}]
    m1, _ = _chat(stack, model, msgs, thinking)
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    a1: dict[str, Any] = {"role": "assistant", "content": m1.get("content") or "", "tool_calls": [call]}
    if send_reasoning:  # as a client that replays reasoning does on every turn
        a1["reasoning_content"] = m1.get("reasoning_content") or ""
    msgs += [a1, {"role": "tool", "tool_call_id": "c1", "content": TOOL_OUTPUT}]
    m2, t2 = _chat(stack, model, msgs, thinking)
    a2: dict[str, Any] = {"role": "assistant", "content": m2.get("content") or ""}
    if send_reasoning:
        a2["reasoning_content"] = m2.get("reasoning_content") or ""
    msgs += [a2, {"role": "user", "content": "Thanks. Now add a test for it."}]
    _m3, t3 = _chat(stack, model, msgs, thinking)
    before = t2["prompt_n"] + t2.get("cache_n", 0) + t2["predicted_n"]
    total = t3["prompt_n"] + t3.get("cache_n", 0)
    return t3["prompt_n"], max(0, total - before)


@pytest.mark.parametrize(("send_reasoning", "thinking"), [(True, True), (False, True), (True, False)])
def test_a_user_turn_after_a_tool_chain_processes_only_its_new_tokens(
    stack: Stack, send_reasoning: bool, thinking: bool
) -> None:
    processed, new = _session(stack, "demo", send_reasoning=send_reasoning, thinking=thinking)
    assert processed <= new + 64, (processed, new)


def test_without_the_stable_template_the_chain_is_processed_again(stack: Stack) -> None:
    processed, new = _session(stack, "stock", send_reasoning=True)
    assert processed > new + 300, (processed, new)  # the whole tool chain, re-rendered


def _messages(stack: Stack, model: str, messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    body = {"model": model, "system": SYSTEM, "messages": messages, "max_tokens": 24, "temperature": 0,
            "tools": [{"name": "read", "input_schema": {"type": "object", "properties": {}}}]}  # fmt: skip
    r = httpx.post(stack.url + "/v1/messages", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["content"], r.json()["timings"]


@pytest.mark.parametrize("send_thinking", [True, False])
def test_the_same_on_anthropic_messages(stack: Stack, send_thinking: bool) -> None:
    """Claude Code's shape: thinking blocks (sent back, or not), tool_use, tool_result."""

    def kept(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [b for b in blocks if send_thinking or b.get("type") != "thinking"]

    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Fix main.py"}]
    c1, _ = _messages(stack, "demo", msgs)
    use = {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": TOOL_OUTPUT}
    msgs += [{"role": "assistant", "content": [*kept(c1), use]}, {"role": "user", "content": [result]}]
    c2, t2 = _messages(stack, "demo", msgs)
    msgs += [{"role": "assistant", "content": kept(c2) or [{"type": "text", "text": ""}]},
             {"role": "user", "content": "Thanks. Now add a test for it."}]  # fmt: skip
    _c3, t3 = _messages(stack, "demo", msgs)
    before = t2["prompt_n"] + t2.get("cache_n", 0) + t2["predicted_n"]
    new = max(0, t3["prompt_n"] + t3.get("cache_n", 0) - before)
    assert t3["prompt_n"] <= new + 64, (t3["prompt_n"], new)


def _responses(stack: Stack, items: list[dict[str, Any]]) -> dict[str, Any]:
    tools = [{"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}}]
    body = {"model": MODEL, "instructions": SYSTEM, "input": items, "tools": tools, "max_output_tokens": 24}
    r = httpx.post(stack.url + "/v1/responses", json=body, timeout=120)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def test_the_same_on_responses_as_codex_replays_it(stack: Stack) -> None:
    """Codex's shape: its reasoning comes back encrypted (unreadable here, so dropped), the call and
    its output as items; the turn after a new user message still processes only its new tokens."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "Fix main.py"}]
    _responses(stack, items)
    items += [
        {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA-opaque"},
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": TOOL_OUTPUT},
    ]
    second = _responses(stack, items)
    text = "".join(
        p.get("text", "") for o in second["output"] if o.get("type") == "message" for p in o.get("content", [])
    )
    items += [{"role": "assistant", "content": [{"type": "output_text", "text": text}]},
              {"role": "user", "content": "Thanks. Now add a test for it."}]  # fmt: skip
    third = _responses(stack, items)
    u2, u3 = second["usage"], third["usage"]  # Responses answers carry usage, not timings
    processed = u3["input_tokens"] - u3["input_tokens_details"]["cached_tokens"]
    new = max(0, u3["input_tokens"] - (u2["input_tokens"] + u2["output_tokens"]))
    assert processed <= new + 64, (processed, new)
