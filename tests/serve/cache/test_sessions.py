"""Prompt-cache hits per client session (``orchestrator.serve.cache.sessions``), on literals."""

from __future__ import annotations

import pytest

from orchestrator.serve.cache import sessions
from orchestrator.serve.cache.sessions import Sessions, session_of

SYSTEM = {"role": "system", "content": "You are an agent."}


def test_hits_add_up_per_session_latest_first() -> None:
    table = Sessions()
    table.record("m", "k:a", {"cache_n": 0, "prompt_n": 700})
    table.record("m", "k:b", {"cache_n": 680, "prompt_n": 60})
    table.record("m", "k:a", {"cache_n": 720, "prompt_n": 20})
    rows = table.rows("m")
    assert [r["session"] for r in rows] == ["k:a", "k:b"]
    assert rows[0]["requests"] == 2
    assert (rows[0]["cached_tokens"], rows[0]["processed_tokens"]) == (720, 720)
    assert rows[0]["hit_rate"] == 0.5
    assert rows[0]["last"] == {"cached_tokens": 720, "processed_tokens": 20}
    assert table.rows("other") == []


def test_timings_without_counts_are_not_counted() -> None:
    table = Sessions()
    table.record("m", "-", {"predicted_n": 4})
    table.record("m", "-", {"cache_n": "x", "prompt_n": 3})
    assert table.rows("m")[0]["requests"] == 1  # absent counts are 0; a malformed one is skipped
    assert table.rows("m")[0]["hit_rate"] is None


def test_sessions_are_bounded(monkeypatch: object) -> None:
    table = Sessions()
    for n in range(sessions.MAX_SESSIONS + 5):
        table.record("m", f"k:{n}", {"cache_n": 1, "prompt_n": 1})
    assert len(table._models["m"]) == sessions.MAX_SESSIONS
    assert len(table.rows("m")) == sessions.SHOWN
    assert table.rows("m")[0]["session"] == f"k:{sessions.MAX_SESSIONS + 4}"


def test_a_session_is_the_client_key_else_the_opening() -> None:
    first = [SYSTEM, {"role": "user", "content": "Fix the bug"}]
    later = [*first, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    other = [SYSTEM, {"role": "user", "content": "Write notes"}]
    assert session_of("k:x", {"messages": first}) == "k:x"
    assert session_of(None, {"messages": first}) == session_of(None, {"messages": later})
    assert session_of(None, {"messages": first}) != session_of(None, {"messages": other})
    assert session_of(None, {"messages": first}).startswith("p:")
    anthropic = {"messages": [{"role": "user", "content": "hi"}]}
    assert session_of(None, {**anthropic, "system": "A"}) != session_of(None, {**anthropic, "system": "B"})
    assert session_of(None, {"input": "hi"}) == "-"


def test_a_conversation_is_known_by_its_opening_in_any_api_shape() -> None:
    """B74: a first turn sent as a string and its follow-up sent as items (Responses), as parts
    (chat) or beside Anthropic's system prompt share the key of their opening."""
    from orchestrator.serve.cache.sessions import conversation_keys

    first = conversation_keys(None, {"input": "U1", "instructions": "I"})
    follow = conversation_keys(
        None,
        {"instructions": "I", "input": [{"role": "user", "content": [{"type": "input_text", "text": "U1"}]},
                                        {"type": "function_call", "name": "f"}, {"role": "user", "content": "U2"}]},
    )  # fmt: skip
    assert first == follow and len(first) == 1
    assert conversation_keys(None, {"input": "U9", "instructions": "I"}) != first  # another conversation
    messages = [{"role": "system", "content": "I"}, {"role": "user", "content": "U1"}]
    chat = conversation_keys("k:s", {"messages": messages})
    assert chat == ["k:s", *first]  # the session key first; chat's system message = Responses' instructions
    assert conversation_keys(None, {"messages": [{"role": "assistant", "content": "A"}]}) == []  # no user turn yet


def test_conversation_models_remember_the_latest_and_forget_the_oldest(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.serve.cache.sessions import ConversationModels

    table = ConversationModels()
    table.remember(["k:a", "o:1"], "demo")
    table.remember(["o:2"], "demo-b")
    assert table.model_of(["k:x", "o:1"]) == "demo" and table.model_of(["o:2"]) == "demo-b"
    assert table.model_of(["k:none"]) is None
    monkeypatch.setattr(sessions, "CONVERSATIONS", 2)  # the bound, made small
    table.remember(["o:3"], "demo")
    assert table.model_of(["k:a"]) is None and table.model_of(["o:3"]) == "demo"
