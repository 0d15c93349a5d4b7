"""Client bug reports about the APIs (``tests/data/api_cases.json``, A01-A11 but A04) on the real path.

One stack: the proxy (API key ``K1``, CORS for ``http://localhost:5173``) in front of a real
llama-server running the q = 0.2 echo model with MTP drafting (acceptance 0.8, so several draft
tokens are accepted in most steps and some drafts are cut), one slot, 2048 tokens of context, as in
the cases. Each test sends the case's request and asserts the case's expected outcome. A04 (a
llama-server killed mid-stream) is covered by ``test_proxy_lifecycle.py``.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import zstandard
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]

CASES = {
    c["id"]: c
    for c in json.loads((Path(__file__).resolve().parents[1] / "data" / "api_cases.json").read_text())["cases"]
}
KEY = "K1"
ORIGIN = "http://localhost:5173"
AUTH = {"authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model_q02: Path) -> Iterator[Stack]:
    models = [
        {
            "name": "demo",
            "parallel": 1,
            "ctx_size": 2048,
            "threads": 1,
            "thinking": False,
            "speculative": {"type": "draft-mtp", "n_max": 3, "n_min": 1},
        }
    ]
    server = {"api_keys": [KEY], "cors_origins": [ORIGIN], "max_body_bytes": 1 << 20}
    s = real_stack(tmp_path_factory.mktemp("cases"), echo_model_q02, bin_info, server=server, models=models)
    yield s
    s.close()


def post(stack: Stack, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(stack.url + "/v1/chat/completions", json=body, headers=headers or AUTH, timeout=60)


def sse_chunks(text: str) -> list[Any]:
    """The ``data:`` payloads of a stream, parsed (``[DONE]`` kept as the string)."""
    out: list[Any] = []
    for event in text.split("\n\n"):
        if event.startswith("data: "):
            payload = event[len("data: ") :]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def stream_text(chunks: list[Any]) -> str:
    return "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if isinstance(c, dict) and c.get("choices")
    )


def test_a01_include_usage_is_its_own_last_chunk(stack: Stack) -> None:
    case = CASES["A01"]
    r = post(stack, case["request"]["body"])
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    chunks = sse_chunks(r.text)
    usage = [i for i, c in enumerate(chunks) if isinstance(c, dict) and c.get("usage")]
    assert len(usage) == 1
    last = chunks[usage[0]]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] <= 8
    assert last["usage"]["total_tokens"] == last["usage"]["prompt_tokens"] + last["usage"]["completion_tokens"]
    finish = [
        i for i, c in enumerate(chunks) if isinstance(c, dict) and c["choices"] and c["choices"][0]["finish_reason"]
    ]
    assert finish == [usage[0] - 1] and chunks[usage[0] + 1] == "[DONE]" and len(chunks) == usage[0] + 2
    plain = sse_chunks(post(stack, {k: v for k, v in case["request"]["body"].items() if k != "stream_options"}).text)
    assert not [c for c in plain if isinstance(c, dict) and c.get("usage")]


def test_a02_max_completion_tokens(stack: Stack) -> None:
    body = CASES["A02"]["request"]["body"]
    r = post(stack, body).json()
    assert r["usage"]["completion_tokens"] <= 5 and r["choices"][0]["finish_reason"] == "length"
    chunks = sse_chunks(post(stack, {**body, "stream": True, "stream_options": {"include_usage": True}}).text)
    assert chunks[-2]["usage"]["completion_tokens"] <= 5
    assert [c["choices"][0]["finish_reason"] for c in chunks if isinstance(c, dict) and c["choices"]][-1] == "length"
    assert stream_text(chunks) == r["choices"][0]["message"]["content"]


def test_a03_stop_string_cut_exactly_with_drafting(stack: Stack) -> None:
    body = CASES["A03"]["request"]["body"]
    full = post(stack, {k: v for k, v in body.items() if k != "stop"}).json()
    text = full["choices"][0]["message"]["content"]
    assert len(text) > 30 and full["timings"]["draft_n_accepted"] > 0
    stop = text[20:23]  # mid-answer, and (almost surely) not on a token boundary
    want = text[: text.index(stop)]
    cut = post(stack, {**body, "stop": [stop, "NEVER_APPEARS"]}).json()
    assert cut["choices"][0]["message"]["content"] == want
    assert cut["choices"][0]["finish_reason"] == "stop"
    streamed = sse_chunks(post(stack, {**body, "stop": [stop, "NEVER_APPEARS"], "stream": True}).text)
    assert stream_text(streamed) == want and stop not in stream_text(streamed)
    nodraft = post(stack, {**body, "stop": [stop, "NEVER_APPEARS"], "speculative": {"n_max": 0}}).json()
    assert nodraft["choices"][0]["message"]["content"] == want
    assert nodraft["timings"].get("draft_n", 0) == 0


def test_a05_responses_routed(stack: Stack) -> None:
    req = CASES["A05"]["request"]
    r = httpx.post(stack.url + req["path"], json=req["body"], headers=AUTH, timeout=60)
    assert r.status_code == 200 and r.json()["object"] == "response" and isinstance(r.json()["output"], list)
    s = httpx.post(stack.url + req["path"], json={**req["body"], "stream": True}, headers=AUTH, timeout=60)
    assert s.text.rstrip().split("\n\n")[-1].startswith("event: response.completed")


def test_a06_messages_and_count_tokens_routed(stack: Stack) -> None:
    req = CASES["A06"]["request"]
    r = httpx.post(stack.url + req["path"], json=req["body"], headers=req["headers"], timeout=60)
    assert r.status_code == 200 and r.json()["type"] == "message"
    assert {"input_tokens", "output_tokens"} <= set(r.json()["usage"])
    s = httpx.post(stack.url + req["path"], json={**req["body"], "stream": True}, headers=req["headers"], timeout=60)
    names = [line.split(": ", 1)[1] for line in s.text.splitlines() if line.startswith("event: ")]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    count_body = {k: v for k, v in req["body"].items() if k != "max_tokens"}
    c = httpx.post(stack.url + "/v1/messages/count_tokens", json=count_body, headers=req["headers"], timeout=60)
    assert c.status_code == 200 and c.json()["input_tokens"] > 0


def test_a07_api_key_headers(stack: Stack) -> None:
    body = CASES["A07"]["request"]["body"]
    assert post(stack, body, {"x-api-key": KEY}).status_code == 200
    for scheme in ("Bearer", "bearer", "BEARER"):
        assert post(stack, body, {"authorization": f"{scheme} {KEY}"}).status_code == 200
    r = post(stack, body, {"content-type": "application/json"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert post(stack, body, {"x-api-key": "K2"}).status_code == 401


def test_a08_cors_preflight_streams_and_401s(stack: Stack) -> None:
    req = CASES["A08"]["request"]
    pre = httpx.options(stack.url + req["path"], headers=req["headers"])
    assert pre.status_code in (200, 204)
    assert pre.headers["access-control-allow-origin"] == ORIGIN
    assert "authorization" in pre.headers["access-control-allow-headers"].lower()
    body = {"model": "demo", "messages": [{"role": "user", "content": "U1"}], "max_tokens": 4, "stream": True}
    s = post(stack, body, {**AUTH, "origin": ORIGIN})
    assert s.status_code == 200 and s.headers["access-control-allow-origin"] == ORIGIN
    denied = post(stack, body, {"origin": ORIGIN})
    assert denied.status_code == 401 and denied.headers["access-control-allow-origin"] == ORIGIN
    foreign = post(stack, body, {**AUTH, "origin": "http://evil.example"})
    assert "access-control-allow-origin" not in foreign.headers


def test_a09_n_above_slots_is_400_naming_n(stack: Stack) -> None:
    r = post(stack, CASES["A09"]["request"]["body"])
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == "n" and "slot" in error["message"]


def test_a10_prompt_over_context_streamed_is_http_400(stack: Stack) -> None:
    body = {**CASES["A10"]["request"]["body"], "messages": [{"role": "user", "content": "U1 " * 2600}]}
    started = time.monotonic()
    r = post(stack, body)
    elapsed = time.monotonic() - started
    assert r.status_code == 400 and r.headers["content-type"].startswith("application/json")
    # OpenAI's shape for it (clients compact on this code), with Anthropic's wording in the message
    assert r.json()["error"]["code"] == "context_length_exceeded"
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert r.json()["error"]["message"].startswith("prompt is too long: ")
    assert not r.text.startswith("data:") and elapsed <= 1.0


def test_a11_compressed_bodies(stack: Stack) -> None:
    body = {k: v for k, v in CASES["A11"]["request"]["body"].items() if not k.startswith("_")}
    raw = json.dumps(body).encode()
    for coding, data in (("gzip", gzip.compress(raw)), ("zstd", zstandard.ZstdCompressor().compress(raw))):
        headers = {**AUTH, "content-type": "application/json", "content-encoding": coding}
        r = httpx.post(stack.url + "/v1/chat/completions", content=data, headers=headers, timeout=60)
        assert r.status_code == 200, r.text
    bomb = gzip.compress(b" " * (8 << 20))  # 8 MiB of JSON whitespace, limit 1 MiB
    headers = {**AUTH, "content-type": "application/json", "content-encoding": "gzip"}
    r = httpx.post(stack.url + "/v1/chat/completions", content=bomb, headers=headers, timeout=60)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    headers["content-encoding"] = "br"
    r = httpx.post(stack.url + "/v1/chat/completions", content=raw, headers=headers, timeout=60)
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_content_encoding"
    headers["content-encoding"] = "gzip"
    r = httpx.post(stack.url + "/v1/chat/completions", content=raw, headers=headers, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_content_encoding"
