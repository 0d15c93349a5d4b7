"""One owner of the running config: a reload (``ModelScheduler.apply``) swaps in a new snapshot and
every reader takes it on its next request: API keys (a removed key is 401 at once), ``auth_health``
/ ``auth_metrics``, body limit, ``when_loading``, TTL, memory budget, model names and aliases in the
OpenAI and Ollama listings, upstream timeouts, and the settings of a model the reload adds.

The readers need no llama-server: the model's replica is the fault-injecting fake (never started)
or a scripted upstream; ``tests/serve/test_reload_lifecycle.py`` runs the same through real ones.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_harness import FakeUpstream, Stack
from supervision_helpers import fake_spec

from orchestrator.config.schema import Config, ModelConfig, ServerConfig, SpeculativeConfig, Timeouts
from orchestrator.launch.spec import InstanceSpec

CHAT = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def _config(**server: Any) -> Config:
    return Config(server=ServerConfig(**server), models=[ModelConfig(name="demo", path="/unused.gguf")])


def _apply(stack: Stack, config: Config, specs: list[InstanceSpec] | None = None) -> str:
    """Reload ``config`` as ``orchestrator up`` does (keeping demo's replica as it is)."""
    specs = specs if specs is not None else [stack.supervisor.instances[0].spec]
    report = stack.run(stack.scheduler.apply(config, specs))
    return str(report.summary())


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(_config(api_keys=["old-key"]), [fake_spec()], tmp_path / "logs")
    yield s
    s.close()


def test_a_removed_api_key_is_refused_at_once_and_an_added_one_works(stack: Stack) -> None:
    for path in ("/v1/models", "/api/tags", "/status"):
        assert httpx.get(stack.url + path, headers=_auth("old-key")).status_code == 200
    _apply(stack, _config(api_keys=["new-key"]))
    for path in ("/v1/models", "/api/tags", "/status"):
        refused = httpx.get(stack.url + path, headers=_auth("old-key"))
        assert refused.status_code == 401, path
        assert httpx.get(stack.url + path, headers=_auth("new-key")).status_code == 200, path
    chat = httpx.post(stack.url + "/v1/chat/completions", json=CHAT, headers=_auth("old-key"))
    assert chat.status_code == 401 and chat.json()["error"]["code"] == "invalid_api_key"
    # no keys at all: every local request passes again
    _apply(stack, _config())
    assert httpx.get(stack.url + "/v1/models").status_code == 200


def test_auth_health_and_auth_metrics_follow_a_reload(stack: Stack) -> None:
    assert httpx.get(stack.url + "/health").status_code in (200, 503)  # open: no key asked
    assert httpx.get(stack.url + "/metrics").status_code == 200
    _apply(stack, _config(api_keys=["old-key"], auth_health=True, auth_metrics=True))
    assert httpx.get(stack.url + "/health").status_code == 401
    assert httpx.get(stack.url + "/metrics").status_code == 401
    assert httpx.get(stack.url + "/metrics", headers=_auth("old-key")).status_code == 200


def test_body_limit_when_loading_and_ttl_follow_a_reload(tmp_path: Path) -> None:
    stack = Stack(_config(max_body_bytes=2000, when_loading="reject"), [fake_spec()], tmp_path / "logs")
    try:
        big = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
        too_big = httpx.post(stack.url + "/v1/chat/completions", json=big)
        assert too_big.status_code == 413 and "2000" in too_big.json()["error"]["message"]
        # the replica is not serving: `reject` answers 503 at once instead of holding the request
        started = time.monotonic()
        rejected = httpx.post(stack.url + "/v1/chat/completions", json=CHAT, timeout=30)
        assert rejected.status_code == 503 and rejected.json()["error"]["code"] == "model_loading"
        assert time.monotonic() - started < 5
        _apply(stack, _config(ttl=77))
        # held until the (fake) replica serves, then forwarded: no 413, no 503
        taken = httpx.post(stack.url + "/v1/chat/completions", json=big, timeout=60)
        assert taken.status_code not in (413, 503), taken.text
        row = httpx.get(stack.url + "/status").json()["models"][0]
        assert row["ttl_s"] == 77
    finally:
        stack.close()


def test_memory_budget_follows_a_reload(stack: Stack) -> None:
    budget = stack.scheduler.budget
    assert "cpu" not in budget.overrides
    _apply(stack, _config(api_keys=["old-key"], memory_budget={"cpu": 123456789}, memory_reserve=1000))
    assert stack.scheduler.budget.overrides == {"cpu": 123456789}
    assert stack.scheduler.budget.reserve == 1000
    memory = httpx.get(stack.url + "/status", headers=_auth("old-key")).json()["memory"]
    assert memory["cpu"]["capacity"] == 123456789


def test_a_model_added_by_reload_is_listed_and_built_from_the_new_config(stack: Stack) -> None:
    key = _auth("old-key")
    added = ModelConfig(
        name="added",
        path="/unused2.gguf",
        ctx_size=8192,
        aliases=["also"],
        speculative=SpeculativeConfig(acceptance_floor=0.5),
    )
    config = Config(server=ServerConfig(api_keys=["old-key"]), models=[*_config().models, added])
    summary = _apply(
        stack,
        config,
        [stack.supervisor.instances[0].spec, fake_spec(name="added-0", alias="added", spec_type="draft-mtp")],
    )
    assert summary == "added added"
    ids = [m["id"] for m in httpx.get(stack.url + "/v1/models", headers=key).json()["data"]]
    assert ids == ["demo", "added", "also"]
    tags = [m["name"] for m in httpx.get(stack.url + "/api/tags", headers=key).json()["models"]]
    assert tags == ["demo", "added", "also"]
    shown = httpx.post(stack.url + "/api/show", json={"model": "also"}, headers=key).json()
    assert 8192 in shown["model_info"].values()
    # its replica was made with the new config: the acceptance floor of models.yaml applies
    inst = stack.scheduler.models["added"].instances[0]
    for _ in range(5):
        inst.record_timings({"predicted_n": 100, "draft_n": 100, "draft_n_accepted": 10})
    assert any("below the floor 0.50" in w for w in inst.warnings), inst.warnings


def test_a_changed_upstream_timeout_applies_to_the_next_request(tmp_path: Path) -> None:
    stack = Stack(_config(timeouts=Timeouts(first_byte=30)), [fake_spec()], tmp_path / "logs")
    try:

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
            while await fake.read_request(reader) is not None:
                await asyncio.sleep(1.5)  # a slow prefill
                answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]}
                await fake.write_json(writer, {**answer, "object": "chat.completion", "model": "demo"})

        fake = FakeUpstream(stack, handler)
        stack.point_at(fake.url)
        assert httpx.post(stack.url + "/v1/chat/completions", json=CHAT, timeout=30).status_code == 200
        _apply(stack, _config(timeouts=Timeouts(first_byte=0.5)))
        late = httpx.post(stack.url + "/v1/chat/completions", json=CHAT, timeout=30)
        assert late.status_code == 504 and late.json()["error"]["code"] == "upstream_timeout"
        assert "0.5" in late.json()["error"]["message"]
        _apply(stack, _config(timeouts=Timeouts(first_byte=30)))
        assert httpx.post(stack.url + "/v1/chat/completions", json=CHAT, timeout=30).status_code == 200
    finally:
        stack.close()


def test_a_refused_reload_changes_no_reader(stack: Stack) -> None:
    from orchestrator.supervise.rollout import RestartRequired

    with pytest.raises(RestartRequired):
        _apply(stack, _config(api_keys=["new-key"], port=1))
    assert httpx.get(stack.url + "/v1/models", headers=_auth("old-key")).status_code == 200
    assert httpx.get(stack.url + "/v1/models", headers=_auth("new-key")).status_code == 401


def test_request_limits_queue_limit_and_queue_timeout_follow_a_reload(tmp_path: Path) -> None:
    from orchestrator.config.limits_types import RequestLimits

    stack = Stack(_config(when_loading="hold"), [fake_spec("--load-seconds", "30")], tmp_path / "logs")
    try:
        three = {**CHAT, "messages": [{"role": "user", "content": "hi"}] * 3}
        _apply(stack, _config(request_limits=RequestLimits(messages=2), queue_limit=1, timeouts=Timeouts(queue=0.5)))
        refused = httpx.post(stack.url + "/v1/chat/completions", json=three)
        assert refused.status_code == 413 and "messages" in refused.text, refused.text
        # the (fake) replica takes 30 s to load: the one request allowed to wait is held 0.5 s
        with httpx.Client(timeout=30) as client:
            started = time.monotonic()
            held = client.post(stack.url + "/v1/chat/completions", json=CHAT)
            assert held.status_code == 503 and "after waiting 0.5 s" in held.json()["error"]["message"]
            assert time.monotonic() - started < 10
    finally:
        stack.close()


def test_a_replica_made_after_a_reload_takes_its_load_and_stall_timeouts(stack: Stack) -> None:
    timeouts = Timeouts(load=77, stall=33)
    added = ModelConfig(name="added", path="/unused2.gguf")
    config = Config(server=ServerConfig(api_keys=["old-key"], timeouts=timeouts), models=[*_config().models, added])
    _apply(stack, config, [stack.supervisor.instances[0].spec, fake_spec(name="added-0", alias="added")])
    inst = stack.scheduler.models["added"].instances[0]
    assert inst.policy.stall_timeout == 33
    assert stack.supervisor.instances[0].policy.stall_timeout != 33  # a running replica keeps its own


def test_header_limits_need_a_restart_and_are_refused(stack: Stack) -> None:
    from orchestrator.supervise.rollout import RestartRequired

    with pytest.raises(RestartRequired, match=r"server\.max_header_bytes"):
        _apply(stack, _config(api_keys=["old-key"], max_header_bytes=4096))
    with pytest.raises(RestartRequired, match=r"server\.timeouts\.client_header"):
        _apply(stack, _config(api_keys=["old-key"], timeouts=Timeouts(client_header=3)))
