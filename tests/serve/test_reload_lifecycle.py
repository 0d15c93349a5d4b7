"""Reloads through real llama-servers (tiny models on the CPU): a model the reload adds is listed by
the official Ollama client (``/api/tags``, ``/api/ps`` with its context) and by ``/v1/models``; a
model the reload removes answers 404 at once while another model's restart is still draining;
reloads asked for in a burst run one at a time, at most one pending (``ConfigReloader``); an API
key the edited file removes is refused as soon as the file is read, before the launch is planned
and while an earlier reload's restart drains, and a reload applied later never brings it back."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest
from scheduler_helpers import chat, lifecycle_config, lifecycle_stack, plan, state, tiny_models, wait_until

from orchestrator.config.load import load_config
from orchestrator.config.schema import Config
from orchestrator.serve.reload import ConfigReloader
from orchestrator.supervise.model_state import ModelState

pytestmark = pytest.mark.native


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


def _write(path: Path, config: Config) -> None:
    path.write_text(json.dumps(config.model_dump(mode="json", exclude_defaults=True)))  # JSON is YAML


def _status_with(url: str, key: str) -> int:
    return httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=30).status_code


def test_a_removed_key_is_refused_once_the_file_is_read_before_the_plan(
    tmp_path: Path, bin_info: Any, tiny: list[Path]
) -> None:
    """The launch plan of a reload took 5 s here (1.4-3.3 s in the stress run) and the old key
    answered meanwhile. Each plan waits on a gate here, so nothing depends on how long it takes."""
    a = {"name": "a", "path": str(tiny[0])}
    both, kept = {"api_keys": ["old", "keep"]}, {"api_keys": ["keep"]}
    stack = lifecycle_stack(tmp_path, bin_info, [a], server=both)
    path = tmp_path / "models.yaml"
    _write(path, lifecycle_config([a], server=both))
    gates, read = [threading.Event(), threading.Event()], []

    def prepare(file: Path) -> Any:
        config = load_config(file)  # read first, then plan, as `up` does
        read.append(config.server.api_keys)
        gates[len(read) - 1].wait(60)
        return config, plan(config, bin_info), []

    reloader = ConfigReloader(path, prepare, stack.scheduler, lambda _note: None)
    try:
        assert _status_with(stack.url, "old") == 200
        first = asyncio.run_coroutine_threadsafe(reloader.reload("SIGHUP"), stack.loop)
        wait_until("the first reload to read the file", lambda: read == [["old", "keep"]])
        _write(path, lifecycle_config([a], server=kept))
        second = asyncio.run_coroutine_threadsafe(reloader.reload("file changed"), stack.loop)
        wait_until("the removed key refused", lambda: _status_with(stack.url, "old") == 401, timeout=30)
        assert reloader.reloads == 0 and not first.done()  # both plans still wait
        assert _status_with(stack.url, "keep") == 200
        gates[0].set()
        first.result(timeout=60)  # the first reload applies the file it read, with the old key...
        assert _status_with(stack.url, "old") == 401  # ...but never brings that key back
        assert not second.done()
        gates[1].set()
        second.result(timeout=60)
        assert _status_with(stack.url, "old") == 401 and _status_with(stack.url, "keep") == 200
        assert stack.scheduler.config.server.api_keys == ["keep"]
    finally:
        for gate in gates:
            gate.set()
        stack.run(reloader.stop())
        stack.close()


def test_a_removed_key_is_refused_while_an_earlier_reload_drains_a_restart(
    tmp_path: Path, bin_info: Any, tiny: list[Path]
) -> None:
    a = {"name": "a", "path": str(tiny[0])}
    both, kept = {"api_keys": ["old", "keep"]}, {"api_keys": ["keep"]}
    stack = lifecycle_stack(tmp_path, bin_info, [a], server=both)
    path = tmp_path / "models.yaml"
    restarted = {**a, "ctx_size": 1024}  # a's launch changes: its replica drains, then restarts
    _write(path, lifecycle_config([restarted], server=both))

    def prepare(file: Path) -> Any:
        config = load_config(file)
        return config, plan(config, bin_info), []

    reloader = ConfigReloader(path, prepare, stack.scheduler, lambda _note: None)
    try:
        headers = {"Authorization": "Bearer keep"}
        assert httpx.post(stack.url + "/v1/chat/completions", json=chat("a"), headers=headers, timeout=120).is_success
        lease = stack.run(stack.scheduler.acquire("a"))  # a request in flight: the restart drains
        first = asyncio.run_coroutine_threadsafe(reloader.reload("SIGHUP"), stack.loop)
        wait_until("a's restart to drain its replica", lambda: stack.scheduler.models["a"].draining, timeout=60)
        _write(path, lifecycle_config([restarted], server=kept))
        second = asyncio.run_coroutine_threadsafe(reloader.reload("file changed"), stack.loop)
        wait_until("the removed key refused", lambda: _status_with(stack.url, "old") == 401, timeout=30)
        assert not first.done() and stack.scheduler.models["a"].draining  # still draining
        stack.loop.call_soon_threadsafe(lease.release)
        assert first.result(timeout=120).restarted == ["a"]
        second.result(timeout=120)
        assert _status_with(stack.url, "old") == 401 and _status_with(stack.url, "keep") == 200
        assert state(stack, "a") is ModelState.READY
    finally:
        stack.run(reloader.stop())
        stack.close()
