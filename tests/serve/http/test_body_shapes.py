"""What a body may hold (``orchestrator.serve.http.shapes``): one check for every API, before any repair.

Through the proxy in front of a real llama-server: an integer of 400 digits in each numeric field
of each API is a 400 in the API's shape (it was a 500 on chat, completions, Anthropic and Ollama),
a wrong type deep in the history is a 400 naming the path (an Ollama message with
``"tool_calls": 5`` was a 500), out-of-range token ids on ``/detokenize`` a 400 (was 502), and
400,000 messages are refused with 413 at once (they held a llama-server core for 600 s).
The unit tests at the end run on literals and need no server.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

from orchestrator.errors import ApiError
from orchestrator.serve.http import shapes as body_shapes
from orchestrator.serve.http.body import parse_body
from orchestrator.serve.http.shapes import Shape
from orchestrator.serve.ollama import translate as ollama
from orchestrator.serve.ollama.shapes import SHOW
from orchestrator.serve.registry import adapter_for
from orchestrator.serve.repair import llama_fields


def shape_of(path: str) -> Shape | None:
    """The shape the route ``path`` declares (its adapter's; ``/api/show``'s listing)."""
    if path == "/api/show":
        return SHOW
    adapter = adapter_for(path)
    return adapter.shape if adapter is not None else None


DATA = Path(__file__).parents[2] / "data"
HUGE = int("1" + "0" * 400)
MSG = [{"role": "user", "content": "hi"}]

# A valid body per route: each numeric field is set to HUGE in turn
BASES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "demo", "messages": MSG, "max_tokens": 2},
    "/v1/completions": {"model": "demo", "prompt": "hi", "max_tokens": 2},
    "/infill": {"model": "demo", "input_prefix": "a", "input_suffix": "b", "max_tokens": 2},
    "/v1/embeddings": {"model": "demo", "input": "hi"},
    "/v1/messages": {"model": "demo", "messages": MSG, "max_tokens": 2},
    "/v1/messages/count_tokens": {"model": "demo", "messages": MSG},
    "/v1/responses": {"model": "demo", "input": "hi", "max_output_tokens": 2},
    "/v1/responses/input_tokens": {"model": "demo", "input": "hi"},
    "/v1/chat/completions/input_tokens": {"model": "demo", "messages": MSG},
    "/apply-template": {"model": "demo", "messages": MSG},
    "/v1/rerank": {"model": "demo", "query": "a", "documents": ["a"]},
    "/tokenize": {"model": "demo", "content": "hi"},
    "/detokenize": {"model": "demo", "tokens": [1]},
    "/api/chat": {"model": "demo", "messages": MSG, "stream": False},
    "/api/generate": {"model": "demo", "prompt": "hi", "stream": False},
    "/api/embed": {"model": "demo", "input": "hi"},
}


def _numeric(field_check: llama_fields.Check) -> bool:
    try:
        field_check("x", 1)
    except ApiError:
        return False
    return True


NUMERIC_FIELDS = [name for name, field_check in llama_fields.FIELDS.items() if _numeric(field_check)]
# Numbers each API defines beyond llama-server's own fields, as (path, dotted field)
API_NUMBERS = [
    ("/v1/chat/completions", "logit_bias.15"),
    ("/v1/chat/completions", "speculative.n_max"),
    ("/v1/embeddings", "dimensions"),
    ("/v1/embeddings", "input"),
    ("/v1/messages", "thinking.budget_tokens"),
    ("/v1/messages", "top_k"),
    ("/v1/messages/count_tokens", "max_tokens"),
    ("/v1/responses", "max_output_tokens"),
    ("/v1/responses", "top_logprobs"),
    ("/v1/rerank", "top_n"),
    ("/detokenize", "tokens"),
    ("/tokenize", "content"),
    ("/api/chat", "keep_alive"),
    ("/api/embed", "keep_alive"),
    ("/api/embed", "dimensions"),
    ("/api/generate", "top_logprobs"),
    *[("/api/chat", f"options.{key}") for key in (*ollama.OPTION_FIELDS, *ollama.LOAD_OPTIONS)],
    *[("/api/generate", f"options.{key}") for key in ("seed", "num_predict", "num_ctx")],
    *[
        (path, name)
        for path in ("/v1/chat/completions", "/v1/completions", "/infill", "/v1/messages", "/v1/responses")
        for name in NUMERIC_FIELDS
    ],
]


def with_field(body: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """``body`` with ``dotted`` (``a.b``) set to ``value``; list-valued fields get ``[value]``."""
    out = json.loads(json.dumps(body))
    here = out
    *parents, last = dotted.split(".")
    for key in parents:
        here = here.setdefault(key, {})
    here[last] = [value] if last in ("input", "tokens", "content") else value
    return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    s = real_stack(tmp_path_factory.mktemp("shapes"), echo_model, bin_info)
    yield s
    s.close()


def assert_shaped(path: str, response: httpx.Response, status: int = 400) -> str:
    """The API's error shape with ``status``; returns the message."""
    assert response.status_code == status, (path, response.status_code, response.text[:300])
    doc = response.json()
    if path.startswith("/api/"):
        return str(doc["error"])
    if path.startswith("/v1/messages"):
        assert doc["type"] == "error"
        return str(doc["error"]["message"])
    return str(doc["error"]["message"])


@pytest.mark.native
def test_a_400_digit_integer_in_every_numeric_field_of_every_api_is_a_400(stack: Stack) -> None:
    assert len(NUMERIC_FIELDS) > 25, NUMERIC_FIELDS
    with httpx.Client(timeout=60) as client:
        for path, dotted in API_NUMBERS:
            body = with_field(BASES[path], dotted, HUGE)
            response = client.post(stack.url + path, content=json.dumps(body).encode())
            message = assert_shaped(path, response)
            assert dotted.split(".")[0] in message and "64 bits" in message, (path, dotted, message)
    assert stack.supervisor.instances[0].restarts == 0


# Wrong types deep in each API's history: (path, body, the path the message must name)
NESTED: list[tuple[str, dict[str, Any], str]] = [
    ("/api/chat", {"messages": [{"role": "assistant", "content": "", "tool_calls": 5}]}, "messages[0].tool_calls"),
    (
        "/api/chat",
        {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 5}}]}]},
        "messages[0].tool_calls[0].function.arguments",
    ),
    ("/api/chat", {"messages": [{"role": "user", "content": "a", "images": [5]}]}, "messages[0].images[0]"),
    ("/api/chat", {"messages": [{"role": "user", "content": ["a"]}]}, "messages[0].content"),
    ("/api/generate", {"prompt": "a", "images": "abc"}, "images"),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
        "messages[0].content[0].text",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": ["x"]}}]}]},
        "messages[0].content[0].image_url.url",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "assistant", "tool_calls": [{"function": 5}]}]},
        "messages[0].tool_calls[0].function",
    ),
    ("/v1/chat/completions", {"messages": [{"role": 5, "content": "x"}]}, "messages[0].role"),
    (
        "/v1/messages",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": {}}]}],
                }
            ]
        },
        "messages[0].content[0].content[0].text",
    ),
    (
        "/v1/messages",
        {"messages": [{"role": "user", "content": [{"type": "image", "source": {"data": 5}}]}]},
        "messages[0].content[0].source.data",
    ),
    (
        "/v1/messages",
        {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "input": "x"}]}]},
        "messages[0].content[0].input",
    ),
    (
        "/v1/responses",
        {"input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": 1}]}]},
        "input[0].content[0].text",
    ),
    (
        "/v1/responses",
        {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": 5}]},
        "input[0].arguments",
    ),
    ("/detokenize", {"tokens": ["a"]}, "tokens[0]"),
]


@pytest.mark.native
@pytest.mark.parametrize(("path", "fields", "where"), NESTED, ids=[f"{p} {w}" for p, _, w in NESTED])
def test_a_wrong_type_deep_in_the_history_is_a_400_naming_its_path(
    stack: Stack, path: str, fields: dict[str, Any], where: str
) -> None:
    body = {**BASES[path], **fields}
    message = assert_shaped(path, httpx.post(stack.url + path, json=body, timeout=60))
    assert message.startswith(where + ":"), message


@pytest.mark.native
def test_out_of_range_token_ids_are_a_400(stack: Stack) -> None:
    for tokens in ([10**9], [-5], [2**32]):  # 2**32 was read as token 0: a 200 with "!"
        response = httpx.post(stack.url + "/detokenize", json={"model": "demo", "tokens": tokens}, timeout=60)
        assert_shaped("/detokenize", response)
        assert response.json()["error"]["param"].startswith("tokens"), response.text
    assert stack.supervisor.instances[0].restarts == 0


@pytest.mark.native
@pytest.mark.parametrize(
    ("path", "key"), [("/v1/chat/completions", "messages"), ("/v1/responses", "input"), ("/api/chat", "messages")]
)
def test_400000_messages_are_refused_at_once_with_the_limit(stack: Stack, path: str, key: str) -> None:
    item = {"role": "user", "content": "word"}
    body = {**BASES[path], key: [item] * 400_000}
    content = json.dumps(body).encode()
    started = time.monotonic()
    response = httpx.post(stack.url + path, content=content, timeout=120)
    elapsed = time.monotonic() - started
    message = assert_shaped(path, response, 413)
    assert "10000" in message and "server.request_limits.messages" in message, message
    # a generous bound (shared CI machine): the refusal reads no message; it took 600 s upstream
    assert elapsed < 20, elapsed
    ok = httpx.post(stack.url + "/v1/chat/completions", json=BASES["/v1/chat/completions"], timeout=60)
    assert ok.status_code == 200, ok.text


@pytest.mark.native
def test_real_agent_bodies_pass_the_check_untouched(stack: Stack) -> None:
    body = json.loads((DATA / "agent_sessions" / "claude_code.json").read_text())["requests"][-1]
    response = httpx.post(stack.url + "/v1/messages/count_tokens", json=body, timeout=60)
    assert response.status_code == 200, response.text[:300]


@pytest.mark.native
def test_a_chat_request_followed_by_garbage_gets_its_answer_then_the_400(stack: Stack) -> None:
    body = json.dumps(BASES["/v1/chat/completions"]).encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\n"
    port = int(stack.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head + b"content-length: %d\r\n\r\n" % len(body) + body + b"\x16\x03\x01 not http\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    first, _, rest = data.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200"), data[:300]
    assert b'"choices"' in rest and b"HTTP/1.1 400" in rest and b"invalid_http" in rest, rest[-400:]


# ---- unit tests on literals (no server) ----


def refused(path: str, body: dict[str, Any], limits: body_shapes.Limits | None = None) -> ApiError:
    raw = json.dumps(body).encode()
    with pytest.raises(ApiError) as info:
        parse_body(raw, shape_of(path), limits)
    return info.value


def test_limits_name_their_key_and_count_the_whole_history() -> None:
    small = body_shapes.Limits(messages=3, content_parts=4, text_chars=100, tools=1, tool_schema_bytes=60)
    msgs = [{"role": "user", "content": [{"type": "text", "text": "a"}] * 2}] * 3
    err = refused("/v1/chat/completions", {"messages": msgs}, small)
    assert err.status == 413 and "server.request_limits.content_parts" in err.message and "4" in err.message
    err = refused("/v1/messages", {"messages": [{"role": "user", "content": "x" * 200}]}, small)
    assert err.status == 413 and "text_chars" in err.message
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    err = refused("/v1/chat/completions", {"messages": [], "tools": [tool, tool]}, small)
    assert err.status == 413 and "request_limits.tools" in err.message
    # the functions inside a Responses namespace count too (600 in one namespace passed a limit of 512)
    namespace = {"type": "namespace", "name": "n", "tools": [{"type": "function", "name": "a"}] * 2}
    err = refused("/v1/responses", {"input": "x", "tools": [namespace]}, small)
    assert err.status == 413 and "request_limits.tools" in err.message
    err = refused("/v1/chat/completions", {"messages": [], "tools": [{**tool, "x": "y" * 60}]}, small)
    assert err.status == 413 and "tool_schema_bytes" in err.message
    err = refused("/v1/responses", {"input": [{"type": "message"}] * 4}, small)
    assert err.status == 413 and err.param == "input"


def test_a_wrong_type_names_what_was_sent() -> None:
    # a boolean read "must be null or an array, not or false" (the tail of "true or false")
    assert refused("/v1/chat/completions", {"messages": [], "tools": True}).message == (
        "tools: must be null or an array, not a boolean"
    )
    assert refused("/v1/chat/completions", {"messages": [], "stop": 5}).message.endswith("not an integer")
    assert refused("/v1/messages", {"messages": "hi"}).message.endswith("not a string")


def test_huge_integers_anywhere_are_found_and_digit_runs_in_text_are_not() -> None:
    body = {"messages": [{"role": "user", "content": "9" * 400}], "x": {"y": [1, 2, -(2**64)]}}
    err = refused("/v1/chat/completions", body)
    assert err.param == "x.y[2]"
    ok = {"messages": [{"role": "user", "content": "9" * 400}], "seed": 2**64 - 1, "n": -(2**63)}
    assert parse_body(json.dumps(ok).encode(), shape_of("/v1/chat/completions")) == ok


def test_real_agent_bodies_and_every_documented_form_pass() -> None:
    for session in sorted((DATA / "agent_sessions").glob("*.json")):  # Claude Code, Codex, opencode
        recorded = json.loads(session.read_text())
        for body in recorded["requests"]:
            assert parse_body(json.dumps(body).encode(), shape_of(recorded["route"])) == body, session.name
    forms: list[tuple[str, dict[str, Any]]] = [
        ("/v1/chat/completions", {"messages": [
            {"role": "system", "content": None},
            {"role": "user", "content": [{"type": "text", "text": "a"},
                                         {"type": "image_url", "image_url": "data:,"},
                                         {"type": "image_url", "image_url": {"url": "data:,", "detail": "low"}}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "ok"}]}),
        ("/v1/completions", {"prompt": [1, 2, "a", [3, 4]]}),
        ("/v1/embeddings", {"input": [[1, 2], [3]]}),
        ("/v1/responses", {"input": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}], "content": None,
             "encrypted_content": None},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "ok"},
            {"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}]}),
        ("/api/chat", {"messages": [
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
            {"role": "tool", "content": "ok", "tool_name": "f"}], "format": {"type": "object"}, "keep_alive": "5m"}),
        ("/api/embed", {"input": ["a", "b"]}),
    ]  # fmt: skip
    for path, body in forms:
        assert parse_body(json.dumps(body).encode(), shape_of(path)) == body, path
