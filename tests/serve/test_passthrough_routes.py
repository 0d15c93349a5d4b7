"""Pass-through routes by model (``/tokenize``, ``/detokenize``, ``/apply-template``, token counting,
``/v1/rerank``, ``/infill``) and the 404 that lists every route, against a real llama-server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import Stack, real_stack

from orchestrator.serve.registry import ADAPTERS

pytestmark = [pytest.mark.native, pytest.mark.slow]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    models = [{"name": "demo", "aliases": ["tiny"], "parallel": 1, "ctx_size": 2048, "threads": 1}]
    s = real_stack(tmp_path_factory.mktemp("pass"), echo_model, bin_info, models=models)
    yield s
    s.close()


def post(stack: Stack, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(stack.url + path, json=body, timeout=60)


def test_tokenize_round_trip_by_model(stack: Stack) -> None:
    tokens = post(stack, "/tokenize", {"model": "tiny", "content": "Hello world"}).json()["tokens"]
    assert tokens and all(isinstance(t, int) for t in tokens)
    assert post(stack, "/detokenize", {"tokens": tokens}).json()["content"] == "Hello world"  # model optional


def test_apply_template_and_input_tokens_get_the_chat_repair(stack: Stack) -> None:
    """A late system message would make the template raise (500); repaired, both routes answer."""
    messages = [{"role": "user", "content": "Hi"}, {"role": "system", "content": "Be brief."}]
    prompt = post(stack, "/apply-template", {"model": "demo", "messages": messages}).json()["prompt"]
    # in place (the default): the late system text stays after the user text it followed
    assert prompt.startswith("<|im_start|>user\nHi\n\n<system-reminder>\nBe brief.\n</system-reminder><|im_end|>")
    count = post(stack, "/v1/chat/completions/input_tokens", {"model": "demo", "messages": messages})
    assert count.status_code == 200 and count.json()["input_tokens"] > 5


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/rerank", {"model": "demo", "query": "a", "documents": ["b"]}),
        ("/infill", {"model": "demo", "input_prefix": "def f(", "input_suffix": "):"}),
        ("/v1/embeddings", {"model": "demo", "input": "a"}),
    ],
)
def test_unsupported_by_the_launch_is_a_400_not_llama_servers_501(
    stack: Stack, path: str, body: dict[str, Any]
) -> None:
    r = post(stack, path, body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "not_supported", r.text


def test_unknown_model_and_unknown_route(stack: Stack) -> None:
    r = post(stack, "/tokenize", {"model": "nope", "content": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = post(stack, "/v1/audio/transcriptions", {"model": "demo"})
    assert r.status_code == 404
    message = r.json()["error"]["message"]
    # the message lists the route table: every forwarded route, the listings, the control routes
    for route in [f"POST {a.path}" for a in ADAPTERS] + ["GET /v1/models", "GET /api/tags", "POST /models/load"]:
        assert route in message, route
