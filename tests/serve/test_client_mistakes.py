"""Each kind of client mistake from the hardening report is a 4xx in the API's shape (real llama-server).

Every case reached llama-server before and came back as 500, was relayed as 502, or broke the
proxy. Unit tests of the checks themselves (``orchestrator.serve.repair.llama_fields``, ``body``) are at
the end and need no server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

from orchestrator.errors import ApiError
from orchestrator.serve.http.body import parse_body, to_utf8
from orchestrator.serve.repair import llama_fields

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "demo", "messages": MESSAGES, "max_tokens": 2, **fields}


CASES: list[tuple[str, str, bytes | dict[str, Any], str | None]] = [
    # (id, path, body, the field the error must name)
    ("lone surrogate in chat", CHAT, b'{"model":"demo","messages":[{"role":"user","content":"\\ud800"}]}',
     "messages[0].content"),
    ("lone surrogate in completions", "/v1/completions", b'{"model":"demo","prompt":"a\\udfffb"}', "prompt"),
    ("temperature 1e400", CHAT, b'{"model":"demo","messages":[{"role":"user","content":"hi"}],"temperature":1e400}',
     None),
    ("tools {}", CHAT, chat(tools={}), "tools"),
    ("tools [{}]", CHAT, chat(tools=[{}]), "tools[0].type"),
    ("tools type ''", CHAT, chat(tools=[{"type": ""}]), "tools[0].type"),
    ("function without name", CHAT, chat(tools=[{"type": "function", "function": {}}]), "tools[0].function.name"),
    ("parameters 5", CHAT, chat(tools=[{"type": "function", "function": {"name": "f", "parameters": 5}}]),
     "tools[0].function.parameters"),
    ("parameters bad schema", CHAT,
     chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}]), "tools"),
    ("reasoning_format unknown", CHAT, chat(reasoning_format="bogus"), "reasoning_format"),
    ("reasoning_format number", CHAT, chat(reasoning_format=5), "reasoning_format"),
    ("grammar with json_schema", CHAT, chat(grammar='root ::= "a"', json_schema={"type": "object"}), "grammar"),
    ("speculative with a bad prompt", "/v1/completions",
     {"model": "demo", "prompt": {"x": 1}, "speculative": {"n_max": 1}, "max_tokens": 2}, None),
    ("flat speculative n_min above n_max", CHAT, chat(**{"speculative.n_max": 1, "speculative.n_min": 3}),
     "speculative.n_min"),
    ("flat speculative n_min above n_max, completions", "/v1/completions",
     {"model": "demo", "prompt": "hi", "speculative.n_max": 0, "speculative.n_min": 2}, "speculative.n_min"),
    ("tool_choice naming a function not in tools", CHAT,
     chat(tools=[{"type": "function", "function": {"name": "f"}}],
          tool_choice={"type": "function", "function": {"name": "g"}}), "tool_choice"),
    ("tool_choice custom", CHAT, chat(tool_choice={"type": "custom", "custom": {"name": "f"}}), "tool_choice.type"),
    ("completions without a prompt", "/v1/completions", {"model": "demo", "max_tokens": 2}, "prompt"),
    ("completions with a null prompt", "/v1/completions", {"model": "demo", "prompt": None}, "prompt"),
    ("prompt token id beyond int32", "/v1/completions", {"model": "demo", "prompt": [2**40], "max_tokens": 2},
     "prompt[0]"),
    ("nested prompt token id beyond int32", "/v1/completions",
     {"model": "demo", "prompt": ["a", [1, 2**32]], "max_tokens": 2}, "prompt[1][1]"),
    ("the whole vocabulary as candidates", CHAT, chat(logprobs=True, top_logprobs=10**6), "top_logprobs"),
    ("samplers i", CHAT, chat(samplers="i"), "samplers"),
    ("samplers assistant", CHAT, chat(samplers="assistant"), "samplers"),
    ("samplers infill unbounded", CHAT, chat(samplers=["top_k", "infill"], top_k=0), "samplers"),
    ("unknown sampler name", CHAT, chat(samplers=["top_k", "bogus"]), "samplers"),
    ("max_tokens beyond int32", CHAT, chat(max_tokens=2**32), "max_tokens"),
    ("top_p beyond its range", CHAT, chat(top_p=5), "top_p"),
    ("n_probs negative", "/v1/completions", {"model": "demo", "prompt": "hi", "n_probs": -3}, "n_probs"),
    ("seed beyond uint32", CHAT, chat(seed=2**40), "seed"),
    ("embedding input object", "/v1/embeddings", {"model": "demo", "input": {"a": 1}}, "input"),
    ("Anthropic temperature 1e400", "/v1/messages",
     b'{"model":"demo","max_tokens":2,"messages":[{"role":"user","content":"hi"}],"temperature":1e400}', None),
    ("Anthropic without max_tokens", "/v1/messages", {"model": "demo", "messages": MESSAGES}, None),
    ("Anthropic max_tokens 0 streamed", "/v1/messages",
     {"model": "demo", "max_tokens": 0, "messages": MESSAGES, "stream": True}, None),
    ("chat max_tokens 0", CHAT, chat(max_tokens=0), "max_tokens"),
    ("Ollama num_predict 0", "/api/generate", {"model": "demo", "prompt": "hi", "stream": False,
                                               "options": {"num_predict": 0}}, None),
    ("Anthropic thinking budget beyond int32", "/v1/messages",
     {"model": "demo", "max_tokens": 2, "messages": MESSAGES, "thinking": {"type": "enabled", "budget_tokens": 2**32}},
     None),
    ("Anthropic max_tokens null", "/v1/messages", {"model": "demo", "max_tokens": None, "messages": MESSAGES}, None),
    ("Responses top_p beyond range", "/v1/responses", {"model": "demo", "input": "hi", "top_p": 7}, "top_p"),
    ("Responses max_output_tokens beyond int32", "/v1/responses",
     {"model": "demo", "input": "hi", "max_output_tokens": 2**31}, "max_output_tokens"),
    ("Ollama lone surrogate", "/api/chat", b'{"model":"demo","messages":[{"role":"user","content":"\\ud800"}]}', None),
]  # fmt: skip


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    s = real_stack(tmp_path_factory.mktemp("mistakes"), echo_model, bin_info)
    yield s
    s.close()


@pytest.mark.native
@pytest.mark.parametrize(("case", "path", "body", "param"), CASES, ids=[c[0] for c in CASES])
def test_client_mistake_is_a_400_naming_the_field(
    stack: Stack, case: str, path: str, body: bytes | dict[str, Any], param: str | None
) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    with httpx.Client(timeout=60) as client:
        response = client.post(stack.url + path, content=content, headers={"content-type": "application/json"})
        assert response.status_code == 400, (case, response.text)
        doc = response.json()
        if path.startswith("/api/"):
            assert isinstance(doc["error"], str)
        elif path.startswith("/v1/messages"):
            assert doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error"
        else:
            assert doc["error"]["type"] == "invalid_request_error"
            if param is not None:
                assert doc["error"]["param"] == param, doc
        # the connection and the model are fine afterwards (a surrogate once reset the next keep-alive request)
        after = client.post(stack.url + CHAT, json=chat())
        assert after.status_code == 200, after.text


@pytest.mark.native
def test_a_tool_choice_object_reaches_llama_server_as_a_string(stack: Stack) -> None:
    """llama-server reads tool_choice as a string: an object was taken as "auto" (a warning in its
    log), so a forced function could come back as text."""
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in "fgh"]
    allowed = {"mode": "auto", "tools": [{"type": "function", "function": {"name": n}} for n in "gh"]}
    sent = []
    for choice in (
        {"type": "function", "function": {"name": "g"}},
        {"type": "allowed_tools", "allowed_tools": allowed},
    ):
        stack.recorder.clear()
        answer = httpx.post(stack.url + CHAT, json=chat(tools=tools, tool_choice=choice), timeout=60)
        assert answer.status_code == 200, answer.text
        (body,) = stack.recorder.bodies(CHAT)
        sent.append((body["tool_choice"], [t["function"]["name"] for t in body["tools"]]))
    assert sent == [("required", ["g"]), ("auto", ["g", "h"])]


@pytest.mark.native
def test_an_ollama_option_error_names_the_option_sent(stack: Stack) -> None:
    """num_predict travels as max_tokens: its error said "max_tokens: ...", a field the client never sent."""
    for option, value in (("num_predict", 2**32), ("num_keep", -5), ("top_k", "x")):
        body = {"model": "demo", "prompt": "hi", "stream": False, "options": {option: value}}
        r = httpx.post(stack.url + "/api/generate", json=body, timeout=60)
        assert r.status_code == 400 and r.json()["error"].startswith(f"options.{option}: "), r.text


@pytest.mark.native
def test_an_unknown_model_name_is_not_echoed_whole(stack: Stack) -> None:
    """A 2 MB model name came back whole in the 404 (and /v1/models/{id} did the same)."""
    name = "m" * 2_000_000
    for r in (
        httpx.post(stack.url + CHAT, json=chat(model=name), timeout=60),
        httpx.get(stack.url + "/v1/models/" + "m" * 5000, timeout=60),
    ):
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found", r.text[:200]
        assert len(r.content) < 2000 and "characters)" in r.json()["error"]["message"]


@pytest.mark.native
def test_null_reasoning_format_means_the_default(stack: Stack) -> None:
    response = httpx.post(stack.url + CHAT, json=chat(reasoning_format=None), timeout=60)
    assert response.status_code == 200, response.text


@pytest.mark.native
@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-32", "latin-1"])
def test_every_text_encoding_of_a_body_is_read(stack: Stack, encoding: str) -> None:
    text = json.dumps(chat(messages=[{"role": "user", "content": "caf\u00e9"}]), ensure_ascii=False)
    charset = {"latin-1": "; charset=iso-8859-1", "utf-16-le": "; charset=utf-16-le"}.get(encoding, "")
    response = httpx.post(
        stack.url + CHAT,
        content=text.encode(encoding),
        headers={"content-type": "application/json" + charset},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    sent = stack.recorder.bodies(CHAT)[-1]
    assert sent["messages"][-1]["content"] == "caf\u00e9"


@pytest.mark.native
def test_invalid_utf8_and_unknown_charset(stack: Stack) -> None:
    bad = httpx.post(stack.url + CHAT, content=b'{"model":"demo","messages":"\xff"}', timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_encoding"
    unknown = httpx.post(
        stack.url + CHAT, content=b"{}", headers={"content-type": "application/json; charset=klingon"}, timeout=30
    )
    assert unknown.status_code == 415 and unknown.json()["error"]["code"] == "unsupported_charset"


# --------------------------------------------------------------------------- the checks, on literals


def refused(body: dict[str, Any]) -> str | None:
    try:
        llama_fields.check(body)
    except ApiError as err:
        assert err.status == 400
        return err.param
    return None


def test_field_ranges_follow_llama_server() -> None:
    assert refused({"n_predict": -1, "top_k": 0, "temperature": 0, "seed": -1, "mirostat": 2}) is None
    assert refused({"max_tokens": 1.5}) == "max_tokens"
    assert refused({"max_tokens": 5.0}) is None  # an integral float is read as that integer
    # Responses: 2**63 - 1 wrapped to -1 there (no limit), True and 1.5 were read as 1
    for bad in (2**63 - 1, 2**31, -2, True, 1.5, "8"):
        assert refused({"max_output_tokens": bad}) == "max_output_tokens", bad
    assert refused({"max_output_tokens": 16}) is None
    # a limit of 0 came back as one generated token, finish_reason "length"
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens", "n_predict"):
        assert refused({key: 0}) == key and refused({key: -1}) is None and refused({key: 1}) is None
    assert refused({"temperature": -0.1}) == "temperature"
    assert refused({"adaptive_decay": 0.995}) == "adaptive_decay"
    assert refused({"cache_prompt": "yes"}) == "cache_prompt"
    assert refused({"stop": [5]}) == "stop" and refused({"stop": "\n"}) is None
    assert refused({"logit_bias": {"15": False, "16": -1.5}}) is None
    assert refused({"logit_bias": [[1]]}) == "logit_bias[0]"
    assert refused({"lora": [{"id": 0, "scale": "x"}]}) == "lora[0].scale"
    assert refused({"dry_sequence_breakers": []}) == "dry_sequence_breakers"
    assert refused({"speculative": {"n_max": -1}}) == "speculative.n_max"
    # chat's logprobs is a flag: 2.5 came back with logprobs and 1e30 without, both as 200
    for bad in (2.5, 1e30, 5, -1, "yes", {}):
        assert refused({"messages": [], "logprobs": bad}) == "logprobs", bad
    assert refused({"messages": [], "logprobs": True, "top_logprobs": 2}) is None
    # logit_bias token ids beyond int32 wrapped to another token (2**32 biased token 0)
    assert refused({"logit_bias": {str(2**32): -100}}) == f"logit_bias.{2**32}"
    assert refused({"logit_bias": [[2**32, -100]]}) == "logit_bias[0]"
    assert refused({"logit_bias": {"15": 1, "hello": 2}}) is None
    assert refused({"prompt": [1, [2, 3], "a"]}) is None and refused({"prompt": [[1, -5]]}) == "prompt[0][1]"
    # all the vocabulary's candidates per token: 14 MB of JSON per generated token
    for key in ("n_probs", "top_logprobs"):
        assert refused({key: 101}) == key and refused({key: 100}) is None
    assert refused({"prompt": "x", "logprobs": 101}) == "logprobs"
    assert refused({"prompt": "x", "logprobs": 3}) is None and refused({"prompt": "x", "logprobs": -1}) == "logprobs"
    assert refused({"tool_choice": "xyz"}) == "tool_choice"
    assert refused({"top_p": None, "stop": None}) is None  # null = the server's default


def test_sampler_chains() -> None:
    assert llama_fields.sampler_chain("kypmt") == ["top_k", "typ_p", "top_p", "min_p", "temperature"]
    names = ["Top-K", "nucleus", "temp", "minp"]
    assert llama_fields.sampler_chain(names) == ["top_k", "top_p", "temperature", "min_p"]
    assert refused({"samplers": ["top_k", "infill"], "top_k": 40}) is None  # bounded: 40 candidates
    assert refused({"samplers": "ki"}) is None  # top_k defaults to 40
    assert refused({"samplers": "ik"}) == "samplers"  # infill before top_k sees the whole vocabulary
    assert refused({"samplers": "kz"}) == "samplers"


def test_null_reasoning_format_is_dropped() -> None:
    assert llama_fields.check({"reasoning_format": None, "a": 1}) == {"a": 1}
    assert llama_fields.check({"reasoning_format": "none"}) is None


def test_llama_server_500s_for_client_mistakes_become_400s() -> None:
    err = llama_fields.client_mistake("Failed to parse tools: Missing tool type: {}")
    assert err is not None and err.status == 400 and err.param == "tools"
    assert llama_fields.client_mistake("failed to decode batch") is None  # a real fault stays a 5xx


def test_body_checks_on_literals() -> None:
    assert parse_body(b'{"a": "\\ud83d\\ude00"}') == {"a": "\U0001f600"}  # a surrogate pair is fine
    with pytest.raises(ApiError) as bad:
        parse_body(b'{"x": ["ok", {"y": "\\udc00"}]}')
    assert bad.value.param == "x[1].y"
    with pytest.raises(ApiError):
        parse_body(b'{"t": -1e999}')
    assert to_utf8(b'{"a":1}', []) == b'{"a":1}'
    assert to_utf8('{"a":"\u00e9"}'.encode("utf-16"), []) == '{"a":"\u00e9"}'.encode()
