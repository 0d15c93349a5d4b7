"""Locked children (``orchestrator.supervise.child_auth``): with ``server.api_keys`` set, each
llama-server answers only with its own key, new at every launch, which only the orchestrator sends.

Real llama-servers behind the real proxy: a keyless request to a child's own port is 401, the
proxy's answers (probes, slots, upstream requests) still work, the key is in the child's
environment but not its command line, a peer's secret is not in the child's environment, and a
relaunch takes a new key (the old one is refused).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from proxy_harness import Stack, real_stack

from orchestrator.supervise import child_auth

KEY = "sk-endpoint"
CHAT = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
PEER_SECRET = "ORCHESTRATOR_TEST_PEER_SECRET"

pytestmark = [pytest.mark.native]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bin_info: Any, echo_model: Path) -> Iterator[Stack]:
    os.environ[PEER_SECRET] = "peer-secret-value"  # in our environment, meant for the peer only
    peers = [{"name": "far", "url": "http://127.0.0.1:9", "models": ["far-model"], "api_key_env": PEER_SECRET}]
    try:
        s = real_stack(tmp_path_factory.mktemp("locked"), echo_model, bin_info, server={"api_keys": [KEY]}, peers=peers)
        yield s
        s.close()
    finally:
        del os.environ[PEER_SECRET]


def child_environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def test_a_keyless_request_to_a_child_port_is_401(stack: Stack) -> None:
    inst = stack.supervisor.instances[0]
    assert inst.base_url is not None and inst.lock.key
    routes = [("POST", "/v1/chat/completions"), ("GET", "/slots"), ("GET", "/props")]
    routes += [("GET", "/v1/models"), ("GET", "/models"), ("GET", "/api/tags")]  # not public at the pin
    for method, path in routes:
        answer = httpx.request(method, inst.base_url + path, json=CHAT if method == "POST" else None, timeout=30)
        assert answer.status_code == 401, (path, answer.status_code, answer.text[:200])
    # the proxy's key is not the child's: an endpoint user cannot reach the child directly
    wrong = httpx.get(inst.base_url + "/slots", headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert wrong.status_code == 401
    # llama-server's public routes stay public (documented in child_auth)
    assert httpx.get(inst.base_url + "/health", timeout=30).status_code == 200


def test_the_proxy_and_its_probes_use_the_childs_key(stack: Stack) -> None:
    inst = stack.supervisor.instances[0]
    auth = {"Authorization": f"Bearer {KEY}"}
    assert httpx.post(stack.url + "/v1/chat/completions", json=CHAT, headers=auth, timeout=60).status_code == 200
    assert httpx.post(stack.url + "/v1/chat/completions", json=CHAT, timeout=60).status_code == 401
    own = httpx.get(inst.base_url + "/slots", headers={"Authorization": f"Bearer {inst.lock.key}"}, timeout=30)
    assert own.status_code == 200
    assert inst.responsive and inst.stalls == 0  # the /slots stall probe answers with the key


def test_the_key_is_in_the_childs_environment_not_its_command_line_and_no_peer_secret(stack: Stack) -> None:
    inst = stack.supervisor.instances[0]
    assert inst.pid is not None and inst.lock.key
    env = child_environ(inst.pid)
    assert env[child_auth.KEY_ENV] == inst.lock.key
    assert PEER_SECRET not in env and os.environ[PEER_SECRET] not in "".join(env.values())
    assert inst.lock.key not in " ".join(psutil.Process(inst.pid).cmdline())


def test_a_relaunch_takes_a_new_key(stack: Stack) -> None:
    inst = stack.supervisor.instances[0]
    old_key, old_pid = inst.lock.key, inst.pid
    assert old_pid is not None
    os.kill(old_pid, signal.SIGKILL)  # a crash: the supervisor relaunches the child
    deadline = time.monotonic() + 120
    while inst.pid == old_pid or inst.state.value not in ("ready", "degraded"):
        assert time.monotonic() < deadline, inst.state
        time.sleep(0.1)
    assert inst.pid != old_pid and inst.lock.key and inst.lock.key != old_key
    stale = httpx.get(inst.base_url + "/slots", headers={"Authorization": f"Bearer {old_key}"}, timeout=30)
    assert stale.status_code == 401
    auth = {"Authorization": f"Bearer {KEY}"}
    assert httpx.post(stack.url + "/v1/chat/completions", json=CHAT, headers=auth, timeout=120).status_code == 200


def test_no_keys_no_lock() -> None:
    from orchestrator.config.schema import Config, ModelConfig, ServerConfig

    config = Config(server=ServerConfig(), models=[ModelConfig(name="m", path="x.gguf")])
    lock = child_auth.ChildLock(config)
    assert lock.launch({"A": "1"}) == {"A": "1"} and lock.key is None
    keyed = child_auth.ChildLock(Config(server=ServerConfig(api_keys=["k"]), models=config.models))
    first = keyed.launch({})[child_auth.KEY_ENV]
    assert first == keyed.key and keyed.launch({})[child_auth.KEY_ENV] != first
    assert {"LLAMA_API_KEY", "LLAMA_ARG_API_KEY_FILE"} <= set(keyed.unset)
