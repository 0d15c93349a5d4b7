"""Gateway contracts agents probe before they send a prompt, on the real app (no llama-server needed):
``HEAD /`` at start, model discovery with paging, errors in the shape of the client that asked,
launcher name suffixes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from proxy_harness import Stack
from supervision_helpers import fake_spec

from orchestrator.config.schema import Config, ModelConfig, ServerConfig

ANTHROPIC = {"anthropic-version": "2023-06-01"}


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    models = [ModelConfig(name="demo", path="/unused.gguf", aliases=["tiny", "Other"])]
    s = Stack(Config(server=ServerConfig(api_keys=["k"]), models=models), [fake_spec()], tmp_path / "logs")
    yield s
    s.close()


def test_head_slash_is_200_without_a_key(stack: Stack) -> None:
    r = httpx.head(stack.url + "/")
    assert r.status_code == 200
    assert httpx.get(stack.url + "/", follow_redirects=False).status_code == 307  # the console still redirects


def test_model_discovery_pages_and_answers_anthropic_clients_in_their_shape(stack: Stack) -> None:
    key = {"x-api-key": "k", **ANTHROPIC}
    r = httpx.get(stack.url + "/v1/models", params={"limit": 1}, headers=key)
    body = r.json()
    assert r.status_code == 200 and [m["id"] for m in body["data"]] == ["demo"] and body["has_more"] is True
    r = httpx.get(stack.url + "/v1/models", params={"limit": 1000, "after_id": "demo"}, headers=key)
    assert [m["id"] for m in r.json()["data"]] == ["tiny", "Other"] and r.json()["has_more"] is False
    unauth = httpx.get(stack.url + "/v1/models", headers=ANTHROPIC)
    assert unauth.status_code == 401 and unauth.json()["type"] == "error"  # Anthropic's shape for Claude Code
    assert unauth.json()["error"]["type"] == "authentication_error"
    openai = httpx.get(stack.url + "/v1/models")
    assert openai.status_code == 401 and "message" in openai.json()["error"]  # OpenAI's for the rest


def test_a_launcher_suffix_resolves_to_the_model(stack: Stack) -> None:
    """Claude Code forwards ``demo[1m]`` (its 1M-context variant); a name in another case resolves too.
    Both reach the model (here: its never-started replica answers 503 while it loads), not a 404."""
    stack.config.server.when_loading = "reject"
    for name in ("demo[1m]", "DEMO", "other"):
        r = httpx.post(
            stack.url + "/v1/chat/completions",
            json={"model": name, "messages": [{"role": "user", "content": "Hi"}]},
            headers={"Authorization": "Bearer k"},
        )
        assert r.status_code == 503 and "model 'demo'" in r.json()["error"]["message"], (name, r.text)
    r = httpx.post(
        stack.url + "/v1/chat/completions",
        json={"model": "nope[1m]", "messages": [{"role": "user", "content": "Hi"}]},
        headers={"Authorization": "Bearer k"},
    )
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_the_ollama_routes_can_be_turned_off(tmp_path: Path) -> None:
    """Benchmark harnesses probe /api/version and /api/tags and switch to Ollama's mode: with
    server.ollama_api false those routes are not there (404), and the OpenAI routes stay."""
    config = Config(server=ServerConfig(ollama_api=False), models=[ModelConfig(name="demo", path="/unused.gguf")])
    s = Stack(config, [fake_spec()], tmp_path / "logs")
    try:
        assert httpx.get(s.url + "/api/version").status_code == 404
        assert httpx.get(s.url + "/api/tags").status_code == 404
        assert httpx.post(s.url + "/api/chat", json={"model": "demo", "messages": []}).status_code in (404, 405)
        assert httpx.get(s.url + "/v1/models").status_code == 200
    finally:
        s.close()
    on = Stack(Config(models=[ModelConfig(name="demo", path="/unused.gguf")]), [fake_spec()], tmp_path / "logs2")
    try:
        assert httpx.get(on.url + "/api/version").status_code == 200
    finally:
        on.close()


def test_codex_finds_its_model_catalog_on_v1_models(stack: Stack) -> None:
    """Codex reads a ``models`` array of its ``ModelInfo`` from ``/models``; other clients get the
    OpenAI/Anthropic list unchanged."""
    key = {"Authorization": "Bearer k"}
    codex = httpx.get(stack.url + "/v1/models", headers={**key, "originator": "codex_cli_rs"}).json()
    (entry,) = codex["models"]
    slot = stack.config.models[0].ctx_size // stack.config.models[0].parallel
    assert entry["slug"] == "demo" and entry["context_window"] == slot
    assert entry["auto_compact_token_limit"] < slot and entry["visibility"] == "list"
    assert [lv["effort"] for lv in entry["supported_reasoning_levels"]] == ["low", "medium", "high"]
    assert entry["input_modalities"] == ["text"] and entry["base_instructions"]
    assert [m["id"] for m in codex["data"]] == ["demo", "tiny", "Other"]
    plain = httpx.get(stack.url + "/v1/models", headers=key).json()
    assert "models" not in plain and [m["id"] for m in plain["data"]] == ["demo", "tiny", "Other"]
    by_agent = httpx.get(stack.url + "/v1/models", headers={**key, "User-Agent": "codex_exec/0.171.0"}).json()
    assert by_agent["models"] == codex["models"]


def test_a_request_for_a_route_not_served_is_counted(stack: Stack) -> None:
    """A client calling a route or method the endpoint does not serve shows in /metrics (a suite
    that checks a client got no non-2xx reads it there)."""
    key = {"Authorization": "Bearer k"}
    assert httpx.get(stack.url + "/v1/nonexistent", headers=key).status_code == 404
    assert httpx.delete(stack.url + "/v1/chat/completions", headers=key).status_code == 405
    text = httpx.get(stack.url + "/metrics", headers=key).text
    assert 'orchestrator_requests_total{endpoint="unknown",model="-",status="404"} 1.0' in text, text[-2000:]
    assert 'orchestrator_requests_total{endpoint="unknown",model="-",status="405"} 1.0' in text
