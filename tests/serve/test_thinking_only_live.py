"""An answer that ends inside its thinking (case B79), through the endpoint on a real llama-server.

Two echo models that stop inside their thinking: with thinking on, the generation prompt ends in
``<think>\\n`` and the echo counts upward from it, so each thinks :data:`THOUGHT` tokens and
then emits ``<|im_end|>`` before any ``</think>``. A continuation (the reasoning as the
assistant's prefill, the thinking closed: the prompt ends in ``</think>\\n\\n``) then writes
:data:`THOUGHT` tokens and ends (``stops``), or ends at once with nothing (``mute``).

Before, every API answered a normal finish with empty visible content (``stop``, ``end_turn``,
``completed``). Now a whole answer is continued once and comes back with the reasoning and the
continuation's text; an answer still empty, and a stream, end with the API's incomplete status.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack
from test_proxy_faults import metric

pytestmark = [pytest.mark.native, pytest.mark.slow]

THOUGHT = 3  # tokens each model thinks before it stops (and the continuation of ``stops`` writes)
ANTHROPIC = {"anthropic-version": "2023-06-01"}
USER = [{"role": "user", "content": "U1"}]


def _chain(start: int, n: int) -> list[int]:
    from orchestrator.models.tiny import load_echo_map

    successor = load_echo_map(0.1).successor
    out = [int(successor[start])]
    while len(out) < n:
        out.append(int(successor[out[-1]]))
    return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    from orchestrator.models.runtime import load_vocab
    from orchestrator.models.tiny import write_tiny_model

    folder = tmp_path_factory.mktemp("thinking-only")
    vocab = load_vocab(echo_model)
    thinking = vocab.tokenize("<|im_start|>assistant\n<think>\n")[-1]  # the generation prompt's last token
    closed = vocab.tokenize("abc\n</think>\n\n")[-1]  # a continuation prompt's last token
    stops_at = _chain(thinking, THOUGHT)[-1]
    stops = write_tiny_model(
        folder / "stops.gguf", mode="echo", q=0.1, stop_after=(stops_at, _chain(closed, THOUGHT)[-1])
    )
    mute = write_tiny_model(folder / "mute.gguf", mode="echo", q=0.1, stop_after=(stops_at, closed))
    base = {"parallel": 1, "ctx_size": 2048, "threads": 1}
    s = real_stack(
        folder, stops, bin_info, models=[{"name": "stops", **base}, {"name": "mute", **base, "path": str(mute)}]
    )
    yield s
    s.close()


def _post(stack: Stack, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    r = httpx.post(stack.url + path, json=body, headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    return r


def _events(r: httpx.Response) -> list[dict[str, Any]]:
    return [
        json.loads(line[5:])
        for line in r.text.splitlines()
        if line.startswith("data:") and line[5:].strip() != "[DONE]"
    ]


def _repairs(stack: Stack, kind: str, model: str) -> float:
    return metric(stack, "orchestrator_repairs_total", kind=kind, model=model) or 0.0


# --- whole answers: continued once ------------------------------------------------------------


def test_chat_is_continued_with_its_reasoning(stack: Stack) -> None:
    before = _repairs(stack, "thinking_continued", "stops")
    body = {"model": "stops", "max_tokens": 32, "messages": USER}
    choice = _post(stack, "/v1/chat/completions", body).json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["content"].strip() and choice["message"]["reasoning_content"].strip()
    assert _repairs(stack, "thinking_continued", "stops") == before + 1


def test_messages_is_continued_with_its_thinking(stack: Stack) -> None:
    body = {"model": "stops", "max_tokens": 4096, "thinking": {"type": "adaptive"}, "messages": USER}
    message = _post(stack, "/v1/messages", body, ANTHROPIC).json()
    assert message["stop_reason"] == "end_turn"
    kinds = [b["type"] for b in message["content"]]
    assert kinds[0] == "thinking" and "text" in kinds
    assert "".join(b.get("text", "") for b in message["content"]).strip()


def test_responses_is_continued_with_its_reasoning(stack: Stack) -> None:
    response = _post(stack, "/v1/responses", {"model": "stops", "input": "U1", "max_output_tokens": 64}).json()
    assert response["status"] == "completed"
    kinds = [i["type"] for i in response["output"]]
    assert kinds[0] == "reasoning" and "message" in kinds
    text = "".join(p["text"] for i in response["output"] if i["type"] == "message" for p in i["content"])
    assert text.strip()


def test_ollama_chat_is_continued(stack: Stack) -> None:
    answer = _post(stack, "/api/chat", {"model": "stops", "messages": USER, "stream": False, "think": True}).json()
    assert answer["message"]["content"].strip() and answer["done_reason"] == "stop"


# --- still empty after the continuation: the API's incomplete status ------------------------


def test_still_empty_ends_incomplete_on_every_api(stack: Stack) -> None:
    before = _repairs(stack, "thinking_only_incomplete", "mute")
    r = _post(stack, "/v1/chat/completions", {"model": "mute", "max_tokens": 32, "messages": USER})
    choice = r.json()["choices"][0]
    assert (choice["finish_reason"], choice["message"]["content"]) == ("length", "")
    assert "stopped inside its thinking" in r.headers["warning"]  # a reason the client can show
    body = {"model": "mute", "max_tokens": 64, "thinking": {"type": "adaptive"}, "messages": USER}
    r = _post(stack, "/v1/messages", body, ANTHROPIC)
    assert r.json()["stop_reason"] == "max_tokens" and r.headers["warning"].startswith("199 orchestrator")
    response = _post(stack, "/v1/responses", {"model": "mute", "input": "U1"}).json()
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    ollama = _post(stack, "/api/chat", {"model": "mute", "messages": USER, "stream": False}).json()
    assert ollama["done_reason"] == "length"
    assert _repairs(stack, "thinking_only_incomplete", "mute") == before + 4


# --- streams: never a normal empty finish -------------------------------------------------


def test_a_stream_that_ended_in_its_thinking_ends_incomplete(stack: Stack) -> None:
    body = {"model": "stops", "max_tokens": 32, "messages": USER, "stream": True}
    chunks = _events(_post(stack, "/v1/chat/completions", body))
    assert [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")][-1] == "length"
    body = {"model": "stops", "max_tokens": 64, "thinking": {"type": "adaptive"}, "messages": USER, "stream": True}
    events = _events(_post(stack, "/v1/messages", body, ANTHROPIC))
    assert [e["delta"]["stop_reason"] for e in events if e["type"] == "message_delta"] == ["max_tokens"]
    events = _events(_post(stack, "/v1/responses", {"model": "stops", "input": "U1", "stream": True}))
    done = [e["response"] for e in events if e["type"] == "response.completed"]
    assert done[0]["status"] == "incomplete"
    lines = _post(stack, "/api/chat", {"model": "stops", "messages": USER}).text.splitlines()
    assert json.loads(lines[-1])["done_reason"] == "length"


def test_a_limit_reached_inside_the_thinking_is_reported_as_the_limit(stack: Stack) -> None:
    body = {"model": "stops", "max_tokens": 2, "messages": USER}
    choice = _post(stack, "/v1/chat/completions", body).json()["choices"][0]
    assert (choice["finish_reason"], choice["message"]["content"]) == ("length", "")
    body = {"model": "stops", "max_tokens": 2, "thinking": {"type": "adaptive"}, "messages": USER}
    assert _post(stack, "/v1/messages", body, ANTHROPIC).json()["stop_reason"] == "max_tokens"
