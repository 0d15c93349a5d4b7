"""The Ollama API through the proxy, with the official ``ollama`` Python client and plain NDJSON requests.

A real llama-server runs the echo model (embeddings on, so ``/api/embed`` has something to call);
the stack has an API key, which the client sends as ``Authorization: Bearer``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]

KEY = "K1"
AUTH = {"authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    models = [
        {
            "name": "demo",
            "aliases": ["tiny"],
            "parallel": 2,
            "ctx_size": 4096,
            "thinking": False,
            "threads": 1,
            "extra_args": ["--embeddings", "--pooling", "mean"],
        }
    ]
    s = real_stack(tmp_path_factory.mktemp("ollama"), echo_model, bin_info, server={"api_keys": [KEY]}, models=models)
    yield s
    s.close()


@pytest.fixture
def client(stack: Stack) -> ollama.Client:
    return ollama.Client(host=stack.url, headers=AUTH, timeout=60)


def test_lists_models_running_models_and_version(stack: Stack, client: ollama.Client) -> None:
    names = [m.model for m in client.list().models]
    assert names == ["demo", "tiny"]
    assert [m.model for m in client.ps().models] == ["demo"]
    shown = client.show("demo:latest")
    assert "completion" in (shown.capabilities or []) and "embedding" in (shown.capabilities or [])
    assert httpx.get(stack.url + "/api/version").json()["version"]
    assert httpx.get(stack.url + "/api/tags").status_code == 401  # the same keys as every route


def test_chat_whole_and_streamed(stack: Stack, client: ollama.Client) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "U1"}]
    whole = client.chat(model="demo", messages=messages, options={"temperature": 0, "num_predict": 8})
    assert whole.done and whole.done_reason == "length" and whole.eval_count == 8
    assert whole.message.role == "assistant" and whole.message.content
    parts = list(
        client.chat(model="tiny", messages=messages, options={"temperature": 0, "num_predict": 8}, stream=True)
    )
    assert [p.done for p in parts].count(True) == 1 and parts[-1].done
    assert "".join(p.message.content or "" for p in parts) == whole.message.content
    assert parts[-1].eval_count == 8 and (parts[-1].prompt_eval_count or 0) > 0
    sent = stack.recorder.bodies()[-1]
    assert sent["max_tokens"] == 8 and sent["temperature"] == 0
    assert sent["chat_template_kwargs"] == {"enable_thinking": False}  # the model's thinking default


def test_plain_ndjson_chat_with_tool_history_and_format(stack: Stack) -> None:
    body = {
        "model": "demo",
        "messages": [
            {"role": "user", "content": "What is in README?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "read", "arguments": {"p": "R"}}}],
            },
            {"role": "tool", "content": "# Demo", "tool_name": "read"},
            {"role": "user", "content": "Answer yes or no."},
        ],
        "format": {
            "type": "object",
            "properties": {"a": {"type": "string", "enum": ["yes", "no"]}},
            "required": ["a"],
            "additionalProperties": False,
        },
        "options": {"temperature": 0, "num_predict": 24},
    }
    r = httpx.post(stack.url + "/api/chat", json=body, headers=AUTH, timeout=60)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert lines[-1]["done"] is True and all(not line["done"] for line in lines[:-1])
    text = "".join(line["message"]["content"] for line in lines)
    assert json.loads(text)["a"] in ("yes", "no")


def test_generate_raw_and_templated_and_load(client: ollama.Client) -> None:
    loaded = client.generate(model="demo", prompt="")
    assert loaded.done and loaded.done_reason == "load"
    templ = client.generate(model="demo", prompt="U1", system="Be brief.", options={"num_predict": 6, "temperature": 0})
    raw = client.generate(model="demo", prompt="U1", raw=True, options={"num_predict": 6, "temperature": 0})
    assert templ.response and raw.response and templ.eval_count == raw.eval_count == 6
    streamed = "".join(
        p.response or ""
        for p in client.generate(
            model="demo", prompt="U1", raw=True, stream=True, options={"num_predict": 6, "temperature": 0}
        )
    )
    assert streamed == raw.response


def test_embed(client: ollama.Client) -> None:
    out = client.embed(model="demo", input=["hello", "world"])
    assert len(out.embeddings) == 2 and len(out.embeddings[0]) > 8


def test_errors_use_ollama_shape(stack: Stack, client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as err:
        client.chat(model="nope", messages=[{"role": "user", "content": "U1"}])
    assert err.value.status_code == 404 and "nope" in err.value.error
    r = httpx.post(
        stack.url + "/api/chat",
        json={"model": "demo", "messages": [{"role": "user", "content": "U1"}], "options": {"bogus": 1}},
        headers=AUTH,
    )
    assert r.status_code == 400 and "options.bogus" in r.json()["error"]
    r = httpx.post(stack.url + "/api/generate", json={"model": "demo", "prompt": "x", "suffix": "y"}, headers=AUTH)
    assert r.status_code == 400 and "suffix" in r.json()["error"]
    for body in ({}, {"model": ""}, {"name": None}):  # Ollama: 400 "model is required", not the first model
        r = httpx.post(stack.url + "/api/show", json=body, headers=AUTH)
        assert r.status_code == 400 and r.json() == {"error": "model is required"}
    r = httpx.post(stack.url + "/api/show", json={"model": "demo:latest"}, headers=AUTH)
    assert r.status_code == 200 and "completion" in r.json()["capabilities"]


def test_logprobs_complete_with_drafting(stack: Stack, client: ollama.Client) -> None:
    """Ollama's logprobs map to chat logprobs: one entry per token, the asked-for candidates each."""
    messages = [{"role": "user", "content": "U1"}]
    for top in (0, 2):
        out = client.chat(
            model="demo",
            messages=messages,
            logprobs=True,
            top_logprobs=top,
            options={"num_predict": 6, "temperature": 0},
        )
        assert out.logprobs is not None and len(out.logprobs) == 6
        assert all(len(t.top_logprobs or []) == top for t in out.logprobs)
    assert stack.recorder.bodies()[-1]["speculative.n_max"] == 0


def test_agent_shaped_chat_with_thinking(stack: Stack, client: ollama.Client) -> None:
    """System prompt, a system reminder inside a user turn, a tool call and its result, thinking on."""
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "<system-reminder>Be brief.</system-reminder>\nRead README.md"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "read", "arguments": {"p": "R"}}}]},
        {"role": "tool", "content": "# Demo", "tool_name": "read"},
        {"role": "system", "content": "Late operator note."},
    ]
    tools = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}}]
    out = client.chat(model="demo", messages=messages, tools=tools, think=True, options={"num_predict": 8})
    assert out.done and out.eval_count == 8
    sent = stack.recorder.bodies()[-1]
    assert sent["chat_template_kwargs"] == {"enable_thinking": True}
    # the late system message stays where it stands (system_messages: in_place), after the tool result
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "tool", "user"]
    assert sent["messages"][0]["content"] == "You are a coding agent."
    assert sent["messages"][-1]["content"] == "<system-reminder>\nLate operator note.\n</system-reminder>"


def test_keep_alive_sets_the_models_idle_time(stack: Stack, client: ollama.Client) -> None:
    """keep_alive is the lifecycle's TTL for the model from then on; /api/ps shows when it expires."""
    managed = stack.scheduler.models["demo"]
    server = stack.config.server
    try:
        client.chat(
            model="demo", messages=[{"role": "user", "content": "U1"}], keep_alive="90s", options={"num_predict": 2}
        )
        assert managed.ttl(server) == 90.0
        [running] = client.ps().models
        assert running.expires_at is not None and running.expires_at.year < 2300
        client.embed(model="demo", input="x", keep_alive=-1)
        assert managed.ttl(server) is None
        assert client.ps().models[0].expires_at.year > 2300  # type: ignore[union-attr]
        # a keep_alive beyond any duration, or a ttl of centuries, is "never" in /api/ps (was a 500)
        client.chat(
            model="demo", messages=[{"role": "user", "content": "U1"}], keep_alive=1e300, options={"num_predict": 1}
        )
        assert managed.ttl(server) is None
        managed.keep_alive = 1e18
        assert client.ps().models[0].expires_at.year > 2300  # type: ignore[union-attr]
        with pytest.raises(ollama.ResponseError) as err:
            client.chat(model="demo", messages=[{"role": "user", "content": "U1"}], keep_alive="soon")
        assert err.value.status_code == 400 and "keep_alive" in err.value.error
        # Ollama's unload idiom: an empty generate with keep_alive 0 (idle time 0: the lifecycle
        # unloads it once idle; these replicas were started by the test, so it leaves them be)
        assert client.generate(model="demo", prompt="", keep_alive=0).done_reason == "unload"
        assert managed.ttl(server) == 0.0
    finally:
        managed.keep_alive = None
