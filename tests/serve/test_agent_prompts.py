"""Cache-stable prompts for recorded agent sessions, rendered and tokenized in-process.

Each session under ``tests/data/agent_sessions/`` is the list of requests a real client sent, turn by
turn (Claude Code, Codex CLI, opencode; ``scripts/capture_agent.py``). Every turn is repaired as the
proxy repairs it, turned into the chat request llama-server makes of it (each API folder's
``chat_view.py``) and
rendered with the GGUF's own template by the in-process runtime: the tokens of turn N+1 must start
with the tokens of turn N (the prompt without its generation prompt, which the model's answer
replaces), so llama-server's prompt cache serves all of turn N again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.serve.anthropic import repair as anthropic
from orchestrator.serve.anthropic.chat_view import anthropic_chat
from orchestrator.serve.cache.chat_view import template_messages
from orchestrator.serve.repair import chat
from orchestrator.serve.repair.chat import RepairPolicy
from orchestrator.serve.responses import repair as responses
from orchestrator.serve.responses.chat_view import responses_chat

pytestmark = pytest.mark.native

DATA = Path(__file__).resolve().parents[1] / "data"
SESSIONS = sorted((DATA / "agent_sessions").glob("*.json"))


def _chat_request(route: str, body: dict[str, Any], policy: RepairPolicy) -> dict[str, Any]:
    if route == "/v1/messages":
        return anthropic_chat(anthropic.repair_request(body, policy).body)
    if route == "/v1/responses":
        return responses_chat(responses.repair_request(body, policy).body)
    repaired = chat.repair_request(body, policy).body
    return {**repaired, "tools": repaired.get("tools")}


def _tokens(gguf: Path, route: str, body: dict[str, Any], policy: RepairPolicy, generation: bool) -> list[int]:
    from orchestrator.models.runtime import load_vocab, render_chat

    req = _chat_request(route, body, policy)
    ctk = req.get("chat_template_kwargs") or {}
    text = render_chat(
        gguf,
        template_messages(req["messages"]),
        add_generation_prompt=generation,
        enable_thinking=ctk.get("enable_thinking"),
        tools=req.get("tools"),
    )
    return load_vocab(gguf).tokenize(text)


@pytest.mark.parametrize("session", SESSIONS, ids=[p.stem for p in SESSIONS])
@pytest.mark.parametrize("thinking", [None, False])
def test_each_turn_starts_with_the_previous_turns_tokens(
    session: Path, thinking: bool | None, demo_model: Path
) -> None:
    data = json.loads(session.read_text())
    policy = RepairPolicy(thinking_default=thinking)
    turns = [_tokens(demo_model, data["route"], body, policy, generation=False) for body in data["requests"]]
    assert len(turns) == 6 and len(turns[0]) > 1000
    for n in range(1, len(turns)):
        before, now = turns[n - 1], turns[n]
        assert now[: len(before)] == before, f"turn {n + 1} diverges at token {_diverge(before, now)} of {len(before)}"
    # and the prompt llama-server evaluates for turn N (with its generation prompt) is all reused
    # but for its last tokens, which the model's answer replaces
    for n in range(1, len(turns)):
        prompt = _tokens(demo_model, data["route"], data["requests"][n - 1], policy, generation=True)
        assert _diverge(prompt, turns[n]) >= len(turns[n - 1])


def test_merge_is_not_cache_stable_for_the_reminder_session(demo_model: Path) -> None:
    """The issue's case: the first request's trailing system message, merged to the front, and the
    next request's <system-reminder> in the user turn render differently (merge stays opt-in)."""
    data = json.loads((DATA / "agent_sessions" / "claude_code_reminder.json").read_text())
    merge = RepairPolicy(system_messages="merge")
    first, second = (_tokens(demo_model, data["route"], b, merge, generation=False) for b in data["requests"][:2])
    assert second[: len(first)] != first
    in_place = RepairPolicy()
    first, second = (_tokens(demo_model, data["route"], b, in_place, generation=False) for b in data["requests"][:2])
    assert second[: len(first)] == first


def _diverge(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
