"""Reloads through real llama-servers (tiny models on the CPU): a model the reload adds is listed by
the official Ollama client (``/api/tags``, ``/api/ps`` with its context) and by ``/v1/models``; a
model the reload removes answers 404 at once while another model's restart is still draining;
reloads asked for in a burst run one at a time, at most one pending (``ConfigReloader``)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest
from scheduler_helpers import chat, lifecycle_config, lifecycle_stack, plan, state, tiny_models, wait_until

from orchestrator.serve.reload import ConfigReloader
from orchestrator.supervise.model_state import ModelState

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, pinned_source: Path) -> list[Path]:
    return tiny_models(tmp_path_factory.mktemp("reload-models"), 2)


def test_a_model_added_by_reload_is_listed_by_ollama_and_openai_with_its_context(
    tmp_path: Path, bin_info: Any, tiny: list[Path]
) -> None:
    a = {"name": "a", "path": str(tiny[0])}
    stack = lifecycle_stack(tmp_path, bin_info, [a])
    try:
        client = ollama.Client(host=stack.url, timeout=120)
        assert [m.model for m in client.list().models] == ["a"]
        config = lifecycle_config([a, {"name": "b", "path": str(tiny[1]), "ctx_size": 1024}])
        report = stack.run(stack.scheduler.apply(config, plan(config, bin_info)))
        assert report.added == ["b"]
        assert [m.model for m in client.list().models] == ["a", "b"]  # /api/tags, before b loads
        ids = {m["id"]: m for m in httpx.get(stack.url + "/v1/models").json()["data"]}
        assert set(ids) == {"a", "b"} and ids["b"]["state"] == "unloaded"
        answer = client.chat(model="b", messages=[{"role": "user", "content": "hi"}], options={"num_predict": 4})
        assert answer.done and answer.message.content is not None
        running = {m.model: m for m in client.ps().models}
        assert set(running) == {"b"}
        assert running["b"].context_length == 1024  # the reload's ctx_size, not the start config's
        assert httpx.get(stack.url + "/v1/models").json()["data"][1]["state"] == "ready"
    finally:
        stack.close()


def test_a_removed_model_is_404_at_once_while_another_model_restarts(
    tmp_path: Path, bin_info: Any, tiny: list[Path]
) -> None:
    a, b = {"name": "a", "path": str(tiny[0])}, {"name": "b", "path": str(tiny[1])}
    stack = lifecycle_stack(tmp_path, bin_info, [a, b])
    try:
        for name in ("a", "b"):
            assert httpx.post(stack.url + "/v1/chat/completions", json=chat(name), timeout=120).status_code == 200
        lease = stack.run(stack.scheduler.acquire("b"))  # a request in flight on b: its restart drains
        config = lifecycle_config([{**b, "ctx_size": 1024}])  # a removed, b's launch changed
        applying = asyncio.run_coroutine_threadsafe(stack.scheduler.apply(config, plan(config, bin_info)), stack.loop)
        wait_until("b's restart to drain its replica", lambda: stack.scheduler.models["b"].draining)
        started = time.monotonic()
        gone = httpx.post(stack.url + "/v1/chat/completions", json=chat("a"), timeout=60)
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "model_not_found", gone.text
        assert time.monotonic() - started < 2
        assert not applying.done()  # b is still restarting
        assert [m["id"] for m in httpx.get(stack.url + "/v1/models").json()["data"]] == ["b"]
        stack.loop.call_soon_threadsafe(lease.release)
        report = applying.result(timeout=120)
        assert report.removed == ["a"] and report.restarted == ["b"]
        assert "a" not in stack.scheduler.models and state(stack, "b") is ModelState.READY
        assert httpx.post(stack.url + "/v1/chat/completions", json=chat("b"), timeout=120).status_code == 200
    finally:
        stack.close()


def test_a_burst_of_reload_requests_runs_at_most_two_reloads_and_stop_drops_the_backlog(
    tmp_path: Path, bin_info: Any, tiny: list[Path]
) -> None:
    a = {"name": "a", "path": str(tiny[0])}
    stack = lifecycle_stack(tmp_path, bin_info, [a])
    path = tmp_path / "models.yaml"
    path.write_text("read by prepare only\n")
    config = stack.supervisor.config
    specs = plan(config, bin_info)

    def prepare(_path: Path) -> Any:
        time.sleep(0.3)  # reading, discovering and planning a file takes a while
        return config, specs, []

    notes: list[str] = []
    reloader = ConfigReloader(path, prepare, stack.scheduler, notes.append)
    try:

        async def burst() -> Any:
            futures = [reloader.request("SIGHUP") for _ in range(20)]
            return await asyncio.gather(*futures)

        reports = stack.run(burst())
        assert len(reports) == 20 and all(r.summary() == "no change" for r in reports)
        assert reloader.attempts <= 2 and reloader.reloads == reloader.attempts

        async def backlog_then_stop() -> float:
            for _ in range(20):
                reloader.request("SIGHUP")
            await asyncio.sleep(0.05)  # the first of them is running
            started = time.monotonic()
            await reloader.stop()
            return time.monotonic() - started

        before = reloader.attempts
        assert stack.run(backlog_then_stop()) < 1.0
        assert reloader.attempts - before <= 1  # the pending one never ran
    finally:
        stack.close()
