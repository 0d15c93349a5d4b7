"""``speculative.adaptive``: the proxy chooses each request's draft length, learns from its
answer, and shows the choice in /metrics, /status and the console's poll (real llama-server)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from proxy_harness import real_stack

pytestmark = pytest.mark.native


def test_adaptive_model_gets_a_k_per_request_and_shows_why(tmp_path: Path, bin_info, demo_model) -> None:
    spec = {"type": "draft-mtp", "n_max": 3, "adaptive": True}
    models = [{"name": "demo", "parallel": 1, "ctx_size": 2048, "speculative": spec}]
    stack = real_stack(tmp_path, demo_model, bin_info, models=models)
    try:
        client = httpx.Client(base_url=stack.url, timeout=120, trust_env=False)
        prompt = {"model": "demo", "prompt": "The quick brown fox jumps over the lazy", "max_tokens": 24}
        for _ in range(3):
            assert client.post("/v1/completions", json={**prompt, "temperature": 0}).status_code == 200
        chat = {"model": "demo", "messages": [{"role": "user", "content": "Привет, как дела"}], "max_tokens": 8}
        with client.stream("POST", "/v1/chat/completions", json={**chat, "stream": True}) as resp:
            assert resp.status_code == 200 and "[DONE]" in resp.read().decode()
        own = {**prompt, "speculative": {"n_max": 2}}
        assert client.post("/v1/completions", json=own).status_code == 200

        sent = [b.get("speculative.n_max") for b in stack.recorder.bodies("/v1/completions")]
        assert sent[0] == 3  # a class never seen: probe at the largest K
        assert all(k in (0, 1, 2, 3) for k in sent) and sent[-1] == 2  # the client's own n_max wins
        assert stack.recorder.bodies("/v1/chat/completions")[0]["speculative.n_max"] == 3

        status = client.get("/status").json()["draft_policy"]["demo"]
        assert status["ks"] == [0, 1, 2, 3]
        recent = status["recent"]  # newest first
        assert recent[0]["reason"] == "client" and recent[0]["k"] == 2
        assert recent[1]["class"] == "chat/no-tools/<2K/cyrillic" and recent[1]["reason"] == "probe"
        assert recent[-1]["class"] == "completions/no-tools/<2K/latin"
        assert all("tokens_per_second" in r and "/" in r["accepted"] for r in recent)  # learned, streamed too
        assert (
            recent[-2]["reason"] in ("best", "no-gain", "unsure", "confirm") and "expected" in recent[-2]
        )  # from the probe

        metrics = client.get("/metrics").text
        assert 'orchestrator_draft_policy_choices_total{class="completions/no-tools/<2K/latin",k="3",' in metrics
        assert 'reason="probe"' in metrics and 'reason="client"' in metrics
        assert "orchestrator_draft_policy_expected_tokens_per_second{" in metrics

        live = client.get("/ui/api/live").json()
        assert live["draft_policy"]["demo"]["recent"][0]["reason"] == "client"
    finally:
        stack.close()


def test_a_model_without_adaptive_is_left_alone(tmp_path: Path, bin_info, demo_model) -> None:
    models = [{"name": "demo", "parallel": 1, "ctx_size": 2048}]
    stack = real_stack(tmp_path, demo_model, bin_info, models=models)
    try:
        body = {"model": "demo", "prompt": "hello", "max_tokens": 4}
        assert httpx.post(f"{stack.url}/v1/completions", json=body, timeout=120, trust_env=False).status_code == 200
        assert "speculative.n_max" not in stack.recorder.bodies("/v1/completions")[0]
        assert httpx.get(f"{stack.url}/status", timeout=30, trust_env=False).json()["draft_policy"] == {}
    finally:
        stack.close()


def test_messages_get_a_draft_length_and_teach_the_policy(tmp_path: Path, bin_info, demo_model) -> None:
    """/v1/messages (Claude Code's API) is tuned like the other routes: native patch 0005 passes the
    chosen ``speculative.n_max`` through llama-server's Anthropic conversion and puts ``timings`` on
    the answer, whole or streamed, so the policy learns from it. A client's own nested draft length
    is flattened and applied (no drafts at K = 0); a bad one is a 400 in Anthropic's shape."""
    spec = {"type": "draft-mtp", "n_max": 3, "adaptive": True}
    models = [{"name": "demo", "parallel": 1, "ctx_size": 2048, "speculative": spec}]
    stack = real_stack(tmp_path, demo_model, bin_info, models=models)
    try:
        client = httpx.Client(base_url=stack.url, timeout=120, trust_env=False)
        body = {"model": "demo", "max_tokens": 16, "messages": [{"role": "user", "content": "hello there"}]}
        whole = client.post("/v1/messages", json=body)
        assert whole.status_code == 200 and whole.json()["timings"]["draft_n"] > 0  # the probe at K = 3
        with client.stream("POST", "/v1/messages", json={**body, "stream": True}) as resp:
            assert resp.status_code == 200 and "message_stop" in resp.read().decode()
        sent = stack.recorder.bodies("/v1/messages")
        assert sent[0]["speculative.n_max"] == 3 and isinstance(sent[1]["speculative.n_max"], int)
        recent = client.get("/status").json()["draft_policy"]["demo"]["recent"]
        assert [r["class"] for r in recent] == ["messages/no-tools/<2K/latin"] * 2
        assert all("tokens_per_second" in r for r in recent), recent  # learned from both answers

        own = client.post("/v1/messages", json={**body, "speculative": {"n_max": 0}})
        assert own.status_code == 200 and own.json()["timings"].get("draft_n", 0) == 0
        assert stack.recorder.bodies("/v1/messages")[-1]["speculative.n_max"] == 0
        assert "speculative" not in stack.recorder.bodies("/v1/messages")[-1]
        assert client.get("/status").json()["draft_policy"]["demo"]["recent"][0]["reason"] == "client"
        for bad in ({"speculative": {"n_max": -1}}, {"speculative.n_max": "3"}):
            resp = client.post("/v1/messages", json={**body, **bad})
            assert resp.status_code == 400, resp.text
            assert resp.json()["type"] == "error" and resp.json()["error"]["type"] == "invalid_request_error"
        assert len(stack.recorder.bodies("/v1/messages")) == 3  # the bad ones never reached llama-server
    finally:
        stack.close()


def test_drafting_off_for_token_probabilities_is_not_shown_as_the_clients_choice(
    tmp_path: Path, bin_info, demo_model
) -> None:
    """logprobs turns drafting off (K = 0) by the proxy's own rule; /status and /metrics said the
    client chose K = 0."""
    spec = {"type": "draft-mtp", "n_max": 3, "adaptive": True}
    models = [{"name": "demo", "parallel": 1, "ctx_size": 2048, "speculative": spec}]
    stack = real_stack(tmp_path, demo_model, bin_info, models=models)
    try:
        client = httpx.Client(base_url=stack.url, timeout=120, trust_env=False)
        body = {"model": "demo", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 6}
        assert client.post("/v1/chat/completions", json={**body, "logprobs": True}).status_code == 200
        assert client.post("/v1/chat/completions", json={**body, "speculative": {"n_max": 1}}).status_code == 200
        assert [b["speculative.n_max"] for b in stack.recorder.bodies()] == [0, 1]
        recent = client.get("/status").json()["draft_policy"]["demo"]["recent"]
        assert [(r["k"], r["reason"]) for r in recent] == [(1, "client"), (0, "token_probs")]
        assert 'k="0",model="demo",reason="token_probs"' in client.get("/metrics").text
    finally:
        stack.close()


@pytest.mark.parametrize("sampling", ["greedy", "probabilistic"])
def test_adaptive_draft_length_works_with_either_draft_sampling(
    tmp_path: Path, bin_info, demo_model, sampling: str
) -> None:
    """``speculative.sampling`` (``--spec-draft-sampling``, b11434) and the adaptive draft length
    together: at an agent's temperature the policy still chooses K per request, llama-server
    drafts (and, probabilistic, verifies by rejection) at that K, and the answers teach the policy."""
    spec = {"type": "draft-mtp", "n_max": 3, "adaptive": True, "sampling": sampling}
    models = [{"name": "demo", "parallel": 1, "ctx_size": 2048, "speculative": spec}]
    stack = real_stack(tmp_path, demo_model, bin_info, models=models)
    try:
        (inst,) = stack.supervisor.instances
        argv = list(inst.spec.argv)
        assert argv[argv.index("--spec-draft-sampling") + 1] == sampling
        client = httpx.Client(base_url=stack.url, timeout=120, trust_env=False)
        prompt = {"model": "demo", "prompt": "The quick brown fox jumps over the lazy", "max_tokens": 24}
        answers = [
            client.post("/v1/completions", json={**prompt, "temperature": 0.8, "seed": i}).json() for i in range(4)
        ]
        sent = [b.get("speculative.n_max") for b in stack.recorder.bodies("/v1/completions")]
        assert sent[0] == 3 and all(k in (0, 1, 2, 3) for k in sent)  # probe at the largest K, then chosen
        drafted = [a["timings"].get("draft_n", 0) for a in answers]
        assert drafted[0] > 0, answers[0]["timings"]  # the probe drafted with this sampling mode
        recent = client.get("/status").json()["draft_policy"]["demo"]["recent"]
        assert len(recent) == 4 and all("/" in r["accepted"] for r in recent)  # every answer taught it
        assert recent[-1]["reason"] == "probe"
    finally:
        stack.close()
