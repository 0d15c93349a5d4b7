"""Generated bad requests on every POST route: never a 5xx, always the API's error shape, bounded time.

Hypothesis sends bodies from ``fuzz_bodies.body_bytes`` (a valid body per route, the OpenAI,
Anthropic, Responses, Ollama, llama-server and model control routes, with fields set to
arbitrary JSON, numbers beyond every range and of 400 digits, nesting 100,000 deep, lone
surrogates, other text encodings, junk; for every API with a history, items from every API's
history with fields of any type at any depth: content parts, tool calls, tool results, images,
Responses items) to the proxy in front of a real llama-server on the tiny model. Every answer must be below 500
(nothing here makes the upstream fail: a 5xx is the proxy's or llama-server's mishandling of a
client mistake), an error must have its API's shape, no request may take longer than
``TIME_BOUND`` s, and afterwards the instance has not restarted and ``/health`` is ok.
The counts by status are written to ``$ORCHESTRATOR_FUZZ_COUNTS`` when it is set.
"""

from __future__ import annotations

import collections
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fuzz_bodies import BASES, body_bytes
from hypothesis import HealthCheck, given, settings
from proxy_harness import Stack, real_stack

pytestmark = [pytest.mark.native, pytest.mark.slow]

TIME_BOUND = 30.0  # seconds per request: generation is capped at 16 tokens of the tiny model
EXAMPLES = int(os.environ.get("ORCHESTRATOR_FUZZ_EXAMPLES", "12"))  # per route
COUNTS: collections.Counter[int] = collections.Counter()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    models = [
        {
            "name": "demo",
            "parallel": 2,
            "ctx_size": 1024,
            "extra_args": ["--embeddings", "--pooling", "mean"],
        }
    ]
    s = real_stack(tmp_path_factory.mktemp("fuzz"), echo_model, bin_info, models=models)
    yield s
    s.close()


def assert_error_shape(path: str, status: int, doc: Any) -> None:
    if path.startswith("/api/"):
        assert isinstance(doc, dict) and isinstance(doc.get("error"), str), doc
    elif path.startswith("/v1/messages"):
        assert doc.get("type") == "error" and isinstance(doc["error"].get("message"), str), doc
    else:
        err = doc.get("error")
        assert isinstance(err, dict) and isinstance(err.get("message"), str) and isinstance(err.get("type"), str), doc


def check_answer(path: str, response: httpx.Response, elapsed: float, content: bytes) -> None:
    COUNTS[response.status_code] += 1
    assert elapsed < TIME_BOUND, f"{path} took {elapsed:.1f} s for {content[:300]!r}"
    assert response.status_code < 500, f"{path} {response.status_code} {response.text[:300]} for {content[:300]!r}"
    if response.status_code >= 400:
        assert_error_shape(path, response.status_code, response.json())


@pytest.mark.parametrize("path", list(BASES))
def test_generated_bodies_get_4xx_never_5xx(stack: Stack, path: str) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(content=body_bytes(path))
    def run(content: bytes) -> None:
        started = time.monotonic()
        with httpx.Client(timeout=TIME_BOUND + 5) as client:
            response = client.post(stack.url + path, content=content, headers={"content-type": "application/json"})
        check_answer(path, response, time.monotonic() - started, content)

    run()


def test_after_the_fuzz_the_model_is_healthy_and_never_restarted(stack: Stack) -> None:
    inst = stack.supervisor.instances[0]
    assert inst.restarts == 0 and inst.stalls == 0
    assert httpx.get(stack.url + "/health", timeout=10).status_code == 200
    chat = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert httpx.post(stack.url + "/v1/chat/completions", json=chat, timeout=60).status_code == 200
    target = os.environ.get("ORCHESTRATOR_FUZZ_COUNTS")
    if target:
        Path(target).write_text(json.dumps(dict(sorted(COUNTS.items()))) + "\n")
