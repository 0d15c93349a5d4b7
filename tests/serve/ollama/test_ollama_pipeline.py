"""Ollama requests take the one request pipeline (``serve/pipeline.py``), through the real endpoint.

Two real llama-server replicas of the echo model (drafting on) behind the proxy; the official
``ollama`` client and plain NDJSON requests:

- an Ollama chat is in the drafting statistics (``/status`` ``drafted``), the TTFT histogram and
  the request counter, streamed or whole;
- ``/api/generate`` with ``raw: true`` streams end with exactly one ``"done": true`` line;
- a replica that dies with the request in flight, before its first byte, hands it to the next
  replica (SIGSTOP keeps the request unanswered, SIGKILL ends the replica; no fake upstream);
- ``/api/tags`` and ``/api/show`` say the model's real architecture from its GGUF header.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest
from prometheus_client.parser import text_string_to_metric_families
from proxy_harness import Stack, real_stack
from supervision_helpers import fake_spec

from orchestrator.config.schema import Config, ModelConfig
from orchestrator.models.gguf_header import read_header
from orchestrator.models.gguf_write import KV, STRING, UINT32, write_gguf

pytestmark = [pytest.mark.native, pytest.mark.slow]

MESSAGES = [{"role": "user", "content": "Tell me a story"}]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    models = [{"name": "demo", "replicas": 2, "parallel": 1, "ctx_size": 2048, "thinking": False, "threads": 1}]
    s = real_stack(tmp_path_factory.mktemp("ollama-pipeline"), echo_model, bin_info, models=models)
    yield s
    s.close()


@pytest.fixture
def client(stack: Stack) -> ollama.Client:
    return ollama.Client(host=stack.url, timeout=120)


def _metric(stack: Stack, name: str, **labels: str) -> float:
    text = httpx.get(stack.url + "/metrics", timeout=10).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def _drafted(stack: Stack) -> int:
    return sum(row["drafted"] for row in httpx.get(stack.url + "/status", timeout=10).json()["instances"])


def test_ollama_chat_shows_in_drafting_statistics_ttft_and_requests(stack: Stack, client: ollama.Client) -> None:
    drafted = _drafted(stack)
    ttft = _metric(stack, "orchestrator_time_to_first_token_seconds_count", model="demo")
    ok = _metric(stack, "orchestrator_requests_total", model="demo", endpoint="ollama_chat", status="200")
    options = {"temperature": 0, "num_predict": 24}
    parts = list(client.chat(model="demo", messages=MESSAGES, options=options, stream=True))
    assert parts[-1].done and parts[-1].eval_count == 24
    whole = client.chat(model="demo", messages=MESSAGES, options=options)
    assert whole.done and whole.message.content == "".join(p.message.content or "" for p in parts)
    assert _drafted(stack) > drafted  # both answers' timings reached the replicas' drafting watch
    assert _metric(stack, "orchestrator_time_to_first_token_seconds_count", model="demo") == ttft + 2
    assert _metric(stack, "orchestrator_requests_total", model="demo", endpoint="ollama_chat", status="200") == ok + 2


def test_raw_generate_stream_ends_with_one_done_line(stack: Stack) -> None:
    body = {"model": "demo", "prompt": "Once upon a time", "raw": True, "options": {"temperature": 0, "num_predict": 8}}
    with httpx.stream("POST", stack.url + "/api/generate", json=body, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in r.iter_lines() if line]
    assert [line["done"] for line in lines].count(True) == 1 and lines[-1]["done"] is True
    assert lines[-1]["done_reason"] == "length" and lines[-1]["eval_count"] == 8
    assert "".join(line["response"] for line in lines[:-1])
    whole = httpx.post(stack.url + "/api/generate", json={**body, "stream": False}, timeout=120).json()
    assert whole["done"] is True and whole["response"] == "".join(line["response"] for line in lines)


def test_a_replica_that_dies_before_its_first_byte_hands_the_chat_to_the_next(stack: Stack) -> None:
    stack.wait_serving()
    first, second = stack.supervisor.instances
    assert first.pid is not None
    body = {"model": "demo", "messages": MESSAGES, "stream": False, "options": {"num_predict": 4}}
    for _ in range(2):  # a kept-alive connection to each replica, as in steady use
        assert httpx.post(stack.url + "/api/chat", json=body, timeout=120).status_code == 200
    os.kill(first.pid, signal.SIGSTOP)  # it accepts the request and never answers
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            future = pool.submit(httpx.post, stack.url + "/api/chat", json=body, timeout=120)
            deadline = time.monotonic() + 30
            while first.in_flight == 0:  # the least busy replica (the first) took it
                assert time.monotonic() < deadline and not future.done(), "the request never reached replica 0"
                time.sleep(0.01)
            assert second.in_flight == 0
            os.kill(first.pid, signal.SIGKILL)  # dies with the request unanswered
            answer = future.result(120)
    finally:
        with contextlib.suppress(ProcessLookupError, TypeError):  # gone already (or no pid)
            os.kill(first.pid, signal.SIGCONT)  # type: ignore[arg-type]
    assert answer.status_code == 200, answer.text
    assert answer.json()["done"] is True and answer.json()["eval_count"] == 4
    stack.wait_serving(120)  # the killed replica comes back for the other tests


def test_tags_and_show_name_each_models_gguf_architecture(
    stack: Stack, client: ollama.Client, echo_model: Path
) -> None:
    arch = read_header(echo_model, keep_string_arrays=()).metadata["general.architecture"]
    listed = client.list().models
    assert listed and all(m.details and m.details.family == arch for m in listed)
    shown = client.show("demo")
    assert shown.modelinfo and shown.modelinfo["general.architecture"] == arch
    assert shown.modelinfo[f"{arch}.context_length"] == 2048


def test_a_model_of_another_architecture_is_listed_as_such(tmp_path: Path) -> None:
    """A second model whose GGUF says ``llama`` (written here; never started) is not labelled qwen35moe."""
    gguf = tmp_path / "other.gguf"
    kvs = [KV("general.architecture", STRING, "llama"), KV("llama.context_length", UINT32, 4096)]
    write_gguf(gguf, kvs, [])
    config = Config(models=[ModelConfig(name="other", path=str(gguf))])
    spec = fake_spec(name="other-0", alias="other")
    spec = replace(spec, server=replace(spec.server, model=gguf))
    stack = Stack(config, [spec], tmp_path / "logs")
    try:
        tags = httpx.get(stack.url + "/api/tags", timeout=10).json()["models"]
        assert [(m["name"], m["details"]["family"], m["details"]["families"]) for m in tags] == [
            ("other", "llama", ["llama"])
        ]
        shown = httpx.post(stack.url + "/api/show", json={"model": "other"}, timeout=10).json()
        assert shown["model_info"]["general.architecture"] == "llama" and shown["details"]["family"] == "llama"
    finally:
        stack.close()
