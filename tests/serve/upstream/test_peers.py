"""Peers end to end on one machine: a second ``orchestrator up`` (the real CLI, another port, an
API key) serves as the peer of a proxy stack in front of a real llama-server.

- a model only the peer serves answers through our endpoint (the key travels, and never shows);
- spillover: while the local queue of ``demo`` is full, the next request goes to the peer;
- a dead peer gives a 502/503 in the API's shape within its timeouts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from proxy_harness import Stack, real_stack
from supervision_helpers import RunningUp

pytestmark = [pytest.mark.native, pytest.mark.slow]

KEY_ENV = "ORCHESTRATOR_TEST_PEER_KEY"
SECRET = "peer-secret-0f9a7c"


def _peer_yaml(path: Path, model: Path) -> Path:
    path.write_text(
        "\n".join(
            [
                "server:",
                "  host: 127.0.0.1",
                "  port: 0",
                f"  api_keys: [{SECRET}]",
                "  timeouts: {load: 120, shutdown_grace: 1}",
                "models:",
                *(f"  - {{name: {name}, path: {model}, ctx_size: 512, threads: 1}}" for name in ("demo", "far")),
            ]
        )
        + "\n"
    )
    return path


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[RunningUp]:
    tmp = tmp_path_factory.mktemp("peer")
    with RunningUp(_peer_yaml(tmp / "models.yaml", echo_model), tmp / "state") as up:
        yield up


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, peer: RunningUp, bin_info: Any, echo_model: Path
) -> Iterator[Stack]:
    mp = pytest.MonkeyPatch()
    mp.setenv(KEY_ENV, SECRET)
    local = {"name": "demo", "ctx_size": 4096, "threads": 1, "spillover": {"peer": "b", "max_local": 1}}
    peers = [{"name": "b", "url": peer.run["endpoint"], "api_key_env": KEY_ENV, "health": {"interval": 0.5}}]
    s = real_stack(tmp_path_factory.mktemp("local"), echo_model, bin_info, models=[local], peers=peers)
    _wait(lambda: httpx.get(s.url + "/peers").json()["peers"][0]["healthy"] is True, "the peer's first check")
    yield s
    s.close()
    mp.undo()


def _wait(predicate: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _routed(stack: Stack) -> dict[tuple[str, str], int]:
    return {(r["model"], r["target"]): r["requests"] for r in httpx.get(stack.url + "/peers").json()["routed"]}


def test_a_peer_only_model_answers_through_our_endpoint(stack: Stack, peer: RunningUp) -> None:
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    ids = {m.id: m for m in client.models.list().data}
    assert ids["far"].owned_by == "peer:b" and ids["demo"].owned_by == "orchestrator"
    out = client.chat.completions.create(
        model="far",
        messages=[
            {"role": "system", "content": "a"},
            {"role": "system", "content": "b"},
            {"role": "user", "content": "hello"},
        ],
        max_tokens=8,
        temperature=0,
    )  # two system messages: the chat repair merges them here, before the request leaves
    assert out.usage is not None and out.usage.completion_tokens > 0
    [sent] = [b for b in stack.recorder.bodies() if b["model"] == "far"]  # what left for the peer
    assert [m["role"] for m in sent["messages"]] == ["system", "user"] and "a" in sent["messages"][0]["content"]
    assert _routed(stack)[("far", "peer:b")] == 1
    metrics = httpx.get(stack.url + "/metrics").text
    assert 'orchestrator_routed_requests_total{model="far",target="peer:b"} 1.0' in metrics
    assert 'orchestrator_peer_up{peer="b"} 1.0' in metrics
    live = httpx.get(stack.url + "/ui/api/live").json()  # what the console reads
    assert (
        live["peers"]["peers"][0]["name"] == "b"
        and {"model": "far", "target": "peer:b", "requests": 1} in (live["peers"]["routed"])
    )
    shown = (
        httpx.get(stack.url + "/ui/api/live").text
        + httpx.get(stack.url + "/peers").text
        + httpx.get(stack.url + "/status").text
        + metrics
    )
    assert SECRET not in shown and f"${KEY_ENV} (set)" in shown
    for log in stack.supervisor.log_dir.glob("*.log"):
        assert SECRET not in log.read_text(errors="replace")


def test_an_ollama_chat_for_a_peer_only_model_goes_to_the_peer(stack: Stack) -> None:
    before = _routed(stack).get(("far", "peer:b"), 0)
    body = {"model": "far:latest", "messages": [{"role": "user", "content": "hi"}], "options": {"num_predict": 6}}
    with httpx.stream("POST", stack.url + "/api/chat", json=body, timeout=60) as r:
        assert r.status_code == 200, r.read()
        lines = [json.loads(line) for line in r.iter_lines() if line]
    assert lines[-1]["done"] is True and lines[-1]["eval_count"] == 6 and lines[-1]["model"] == "far"
    whole = httpx.post(stack.url + "/api/chat", json={**body, "stream": False}, timeout=60).json()
    assert whole["done"] is True and whole["eval_count"] == 6 and whole["model"] == "far"
    assert _routed(stack)[("far", "peer:b")] == before + 2  # both went to the peer, as OpenAI chat
    sent = [b for b in stack.recorder.bodies() if b["model"] == "far"][-2:]  # the internal OpenAI body
    assert [b["max_tokens"] for b in sent] == [6, 6] and sent[0]["stream"] is True


def test_spillover_when_the_local_queue_is_full(stack: Stack) -> None:
    before = _routed(stack)
    long = {
        "model": "demo",
        "messages": [{"role": "user", "content": "go"}],
        "max_tokens": 3000,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream("POST", stack.url + "/v1/chat/completions", json=long, timeout=120) as first:
        lines = first.iter_lines()
        assert next(lines).startswith("data: ")  # the local request runs (and is not read further)
        assert httpx.get(stack.url + "/peers").json()["local_pending"] == {"demo": 1}
        short = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        resp = httpx.post(stack.url + "/v1/chat/completions", json=short, timeout=60)
        assert resp.status_code == 200, resp.text
        assert _routed(stack).get(("demo", "peer:b"), 0) == before.get(("demo", "peer:b"), 0) + 1
        for _ in lines:  # drain the local stream to its end
            pass
    after = httpx.post(stack.url + "/v1/chat/completions", json=short, timeout=60)
    assert after.status_code == 200
    routed = _routed(stack)
    assert routed[("demo", "local")] == before.get(("demo", "local"), 0) + 2  # the long one, then this one


def test_spillover_while_the_local_model_is_down(stack: Stack) -> None:
    before = _routed(stack).get(("demo", "peer:b"), 0)
    stack.run(stack.supervisor.stop(5.0))  # the local replica is gone (when_down: true)
    body = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    started = time.monotonic()
    resp = httpx.post(stack.url + "/v1/chat/completions", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    assert time.monotonic() - started < 30  # not held for the local model (server.timeouts.queue)
    assert _routed(stack)[("demo", "peer:b")] == before + 1

    async def restart() -> None:
        for inst in stack.supervisor.instances:
            inst.start()

    stack.run(restart())
    stack.wait_serving(120)


def test_a_dead_peer_is_an_api_error_within_its_timeout(stack: Stack, peer: RunningUp) -> None:
    assert peer.proc is not None
    peer.proc.terminate()
    peer.proc.wait(timeout=60)
    body = {"model": "far", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    started = time.monotonic()
    resp = httpx.post(stack.url + "/v1/chat/completions", json=body, timeout=60)
    assert time.monotonic() - started < 10  # connect timeout 5 s at most, usually refused at once
    assert resp.status_code in (502, 503), resp.text
    error = resp.json()["error"]
    assert error["code"] == "peer_unavailable" and "peer b" in error["message"]
    _wait(lambda: httpx.get(stack.url + "/peers").json()["peers"][0]["healthy"] is False, "the failed check")
    anthropic = httpx.post(
        stack.url + "/v1/messages",
        json={"model": "far", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
        timeout=60,
    )
    assert anthropic.status_code == 503 and anthropic.json()["type"] == "error"  # Anthropic's shape
    assert json.loads(anthropic.text)["error"]["type"]
    # the local model still answers locally (the peer being down does not matter to it)
    local = httpx.post(stack.url + "/v1/chat/completions", json={**body, "model": "demo"}, timeout=60)
    assert local.status_code == 200


def test_status_prints_peers_and_where_requests_went() -> None:
    from rich.console import Console

    from orchestrator.cli.control import _print_peers

    console = Console(record=True, width=200)
    peers = {
        "peers": [
            {"name": "b", "url": "http://10.0.0.2:8080", "healthy": False, "last_error": "ConnectError", "models": []},
            {"name": "c", "url": "http://10.0.0.3:8080", "healthy": True, "last_error": None, "models": ["far"]},
        ],
        "routed": [{"model": "far", "target": "peer:c", "requests": 3}],
    }
    _print_peers(console, peers)
    text = console.export_text()
    assert "peer b http://10.0.0.2:8080: DOWN (ConnectError)" in text
    assert "peer c http://10.0.0.3:8080: up; models far" in text and "far -> peer:c: 3" in text
