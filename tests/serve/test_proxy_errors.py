"""Requests the proxy refuses itself, always in the OpenAI error shape and without an upstream call.

The instance is pointed at a fake upstream that counts connections, so "no upstream call" is
checked, not assumed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from proxy_harness import FakeUpstream, Stack, chat_completion
from supervision_helpers import fake_spec

from orchestrator.config.schema import Config, ModelConfig, ServerConfig
from orchestrator.errors import ApiError

CHAT = {"model": "demo", "messages": [{"role": "user", "content": "Hi"}]}
KEY = "sk-test-123"


def build(tmp_path: Path, *, models: list[str] = ("demo",), **server: Any) -> tuple[Stack, FakeUpstream]:
    config = Config(
        server=ServerConfig(**server),
        models=[ModelConfig(name=m, path="/unused.gguf", aliases=[f"{m}-alias"]) for m in models],
    )
    stack = Stack(config, [fake_spec(name=f"{m}-0", alias=m) for m in models], tmp_path / "logs")

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while await fake.read_request(reader) is not None:
            await fake.write_json(writer, chat_completion("ok"))

    fake = FakeUpstream(stack, handler)
    stack.point_at(fake.url)
    return stack, fake


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[tuple[Stack, FakeUpstream]]:
    stack, fake = build(tmp_path, max_body_bytes=2000)
    yield stack, fake
    stack.close()


def assert_error(r: httpx.Response, status: int, type_: str, **fields: Any) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == type_
    for key, value in fields.items():
        assert error[key] == value
    return error


def test_body_over_the_limit_is_413(proxy: tuple[Stack, FakeUpstream]) -> None:
    stack, fake = proxy
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
    assert_error(
        httpx.post(stack.url + "/v1/chat/completions", json=big), 413, "invalid_request_error", code="request_too_large"
    )

    # no Content-Length (chunked upload): counted while reading
    def chunks() -> Iterator[bytes]:
        data = json.dumps(big).encode()
        for i in range(0, len(data), 1000):
            yield data[i : i + 1000]

    assert_error(httpx.post(stack.url + "/v1/chat/completions", content=chunks()), 413, "invalid_request_error")
    assert fake.connections == 0


def test_malformed_json_is_400(proxy: tuple[Stack, FakeUpstream]) -> None:
    stack, fake = proxy
    for raw in (b'{"model": "demo", "messages": [', b"[1, 2]", b"\xff\xfe"):
        assert_error(
            httpx.post(stack.url + "/v1/chat/completions", content=raw),
            400,
            "invalid_request_error",
            code="invalid_json",
        )
    assert fake.connections == 0


def test_unknown_model_is_404_listing_the_names(proxy: tuple[Stack, FakeUpstream]) -> None:
    stack, fake = proxy
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-4o", messages=CHAT["messages"])
    error = info.value.body
    assert isinstance(error, dict)
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert "demo, demo-alias" in error["message"]
    assert fake.connections == 0


def test_model_may_be_omitted_only_with_one_model(tmp_path: Path) -> None:
    stack, fake = build(tmp_path)
    try:
        r = httpx.post(stack.url + "/v1/chat/completions", json={"messages": CHAT["messages"]})
        assert r.status_code == 200 and json.loads(fake.requests[0]) == {"messages": CHAT["messages"]}
    finally:
        stack.close()
    stack, fake = build(tmp_path / "two", models=["a", "b"])
    try:
        r = httpx.post(stack.url + "/v1/chat/completions", json={"messages": CHAT["messages"]})
        assert_error(r, 400, "invalid_request_error", param="model", code="model_required")
        assert fake.connections == 0
    finally:
        stack.close()


def test_api_keys(tmp_path: Path) -> None:
    stack, fake = build(tmp_path, api_keys=[KEY, "other"])
    try:
        url = stack.url + "/v1/chat/completions"
        error = assert_error(httpx.post(url, json=CHAT), 401, "authentication_error", code="invalid_api_key")
        assert "Bearer" in error["message"]
        assert_error(httpx.post(url, json=CHAT, headers={"authorization": "Bearer wrong"}), 401, "authentication_error")
        assert_error(httpx.get(stack.url + "/v1/models"), 401, "authentication_error")
        assert_error(httpx.get(stack.url + "/status"), 401, "authentication_error")
        assert fake.connections == 0
        client = openai.OpenAI(base_url=stack.url + "/v1", api_key=KEY, max_retries=0)
        assert (
            client.chat.completions.create(model="demo", messages=CHAT["messages"]).choices[0].message.content == "ok"
        )
        # health and metrics stay open by default
        assert httpx.get(stack.url + "/health").status_code == 200
        assert httpx.get(stack.url + "/metrics").status_code == 200
    finally:
        stack.close()
    stack, _fake = build(tmp_path / "strict", api_keys=[KEY], auth_health=True, auth_metrics=True)
    try:
        assert_error(httpx.get(stack.url + "/health"), 401, "authentication_error")
        assert_error(httpx.get(stack.url + "/metrics"), 401, "authentication_error")
        ok = httpx.get(stack.url + "/metrics", headers={"authorization": f"Bearer {KEY}"})
        assert ok.status_code == 200 and "orchestrator_requests_total" in ok.text
    finally:
        stack.close()


def test_framework_errors_are_openai_shaped(proxy: tuple[Stack, FakeUpstream]) -> None:
    stack, _fake = proxy
    assert_error(httpx.get(stack.url + "/v1/nothing"), 404, "not_found_error", code="not_found")
    r = httpx.get(stack.url + "/v1/chat/completions")
    assert_error(r, 405, "invalid_request_error", code="method_not_allowed")
    assert r.headers["allow"] == "POST"


def test_request_repair_errors_never_reach_upstream(proxy: tuple[Stack, FakeUpstream]) -> None:
    stack, fake = proxy
    body = {"model": "demo", "messages": [{"role": "user", "content": "Hi"}], "speculative": {"n_max": -1}}
    assert_error(
        httpx.post(stack.url + "/v1/chat/completions", json=body),
        400,
        "invalid_request_error",
        param="speculative.n_max",
    )
    assert_error(
        httpx.post(stack.url + "/v1/completions", json={"model": "demo", "prompt": "x", "speculative": 3}),
        400,
        "invalid_request_error",
        param="speculative",
    )
    assert fake.connections == 0


def test_cors_is_off_by_default_and_on_when_configured(tmp_path: Path) -> None:
    preflight = {"origin": "http://ui.example", "access-control-request-method": "POST"}
    stack, _ = build(tmp_path)
    try:
        r = httpx.options(stack.url + "/v1/chat/completions", headers=preflight)
        assert "access-control-allow-origin" not in r.headers
    finally:
        stack.close()
    stack, _ = build(tmp_path / "cors", cors_origins=["http://ui.example"])
    try:
        r = httpx.options(stack.url + "/v1/chat/completions", headers=preflight)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://ui.example"
        r = httpx.post(stack.url + "/v1/chat/completions", json=CHAT, headers={"origin": "http://ui.example"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://ui.example"
    finally:
        stack.close()


def test_unexpected_exception_is_a_500_in_the_openai_shape(proxy: tuple[Stack, FakeUpstream]) -> None:
    stack, fake = proxy

    async def broken(model: str) -> None:
        raise RuntimeError("bug in acquire")

    stack.scheduler.acquire = broken  # type: ignore[method-assign,assignment]
    assert_error(httpx.post(stack.url + "/v1/chat/completions", json=CHAT), 500, "server_error", code="internal_error")
    assert fake.connections == 0


def test_nan_and_deep_nesting_are_400_invalid_json() -> None:
    """NaN/Infinity pass Python's json but not llama-server's parser; deep nesting would recurse."""
    from orchestrator.serve.http.body import parse_body

    for raw in (b'{"model":"demo","temperature":NaN}', b'{"x":Infinity}', b"[" * 100_000):
        with pytest.raises(ApiError) as info:
            parse_body(raw)
        assert info.value.status == 400 and info.value.code == "invalid_json"


def test_upstream_501_is_a_400_not_a_5xx() -> None:
    """A route the model's launch does not serve is the client's mistake (capabilities say so)."""
    from orchestrator.serve.upstream.errors import from_upstream_status

    err = from_upstream_status(501, b'{"error":{"message":"This server does not support embeddings."}}')
    assert err.status == 400 and err.code == "not_supported" and "embeddings" in err.message
