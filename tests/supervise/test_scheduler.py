"""Model lifecycle against real llama-server processes: load on first request, eviction under a
memory budget, never evicting a busy model, TTL and pinning, failed loads, the control routes.

Several tiny models (distinct seeds) share a CPU ``memory_budget`` that holds one or two of them.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from scheduler_helpers import chat, lifecycle_stack, pids, room_for, state, tiny_models, wait_until

from orchestrator.supervise.model_state import ModelState

pytestmark = pytest.mark.native


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, pinned_source: Path) -> list[Path]:
    return tiny_models(tmp_path_factory.mktemp("lifecycle-models"), 3)


def test_a_request_for_an_unloaded_model_loads_it_streamed_and_not(
    tmp_path: Path, bin_info: Any, tiny: list[Path]
) -> None:
    stack = lifecycle_stack(
        tmp_path, bin_info, [{"name": "a", "path": str(tiny[0])}, {"name": "b", "path": str(tiny[1])}],
        budget=room_for(2),
    )  # fmt: skip
    try:
        assert state(stack, "a") is ModelState.UNLOADED and pids(stack, "a") == [None]
        r = httpx.post(stack.url + "/v1/chat/completions", json=chat("a"), timeout=120)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] > 0
        assert state(stack, "a") is ModelState.READY

        # the held stream gets SSE comment lines while b loads, then the answer
        lines: list[str] = []
        with httpx.stream("POST", stack.url + "/v1/chat/completions", json=chat("b", stream=True), timeout=120) as s:
            assert s.status_code == 200
            lines.extend(s.iter_lines())
        comments = [ln for ln in lines if ln.startswith(":")]
        data = [ln for ln in lines if ln.startswith("data: ")]
        assert comments and comments[0].startswith(": waiting for model b")
        assert lines.index(comments[-1]) < lines.index(data[0])  # comments only before the answer
        assert data[-1] == "data: [DONE]" and len(data) > 2
        assert state(stack, "b") is ModelState.READY and state(stack, "a") is ModelState.READY  # room for both

        models = {m["id"]: m for m in httpx.get(stack.url + "/v1/models").json()["data"]}
        assert models["a"]["state"] == "ready" and models["a"]["memory"]["cpu"] > 0
    finally:
        stack.close()


def test_eight_alternating_requests_with_room_for_one_model_take_one_swap(
    tmp_path: Path, bin_info: Any, tiny: list[Path]
) -> None:
    stack = lifecycle_stack(
        tmp_path, bin_info, [{"name": "a", "path": str(tiny[0])}, {"name": "b", "path": str(tiny[1])}],
        budget=room_for(1),
    )  # fmt: skip

    async def burst() -> list[int]:
        async with httpx.AsyncClient(timeout=120) as client:
            bodies = [chat("a" if i % 2 == 0 else "b", f"request {i}") for i in range(8)]
            answers = await asyncio.gather(*(client.post(stack.url + "/v1/chat/completions", json=b) for b in bodies))
        return [a.status_code for a in answers]

    try:
        started = time.monotonic()
        statuses = asyncio.run(burst())
        elapsed = time.monotonic() - started
        assert statuses == [200] * 8
        lc = stack.scheduler
        # all 8 arrive while a loads: a serves its 4, one swap, b serves its 4
        assert lc.swaps == 1, lc.snapshot()
        assert lc.models["a"].loads == 1 and lc.models["b"].loads == 1
        # whichever request reached the server first decided which model loaded first
        first, second = sorted(("a", "b"), key=lambda n: -lc.models[n].evictions)
        assert lc.models[first].evictions == 1 and state(stack, second) is ModelState.READY
        print(f"\n8 alternating requests, room for one model: {lc.swaps} swap(s), {elapsed:.2f} s in total")
        metrics = httpx.get(stack.url + "/metrics").text
        assert "orchestrator_model_swaps_total 1.0" in metrics
        assert 'orchestrator_model_loads_total{model="a"} 1.0' in metrics
        assert f'orchestrator_model_unloads_total{{model="{first}",reason="memory"}} 1.0' in metrics
        assert 'orchestrator_model_load_seconds_count{model="b"} 1.0' in metrics
        waits = [ln for ln in metrics.splitlines() if ln.startswith("orchestrator_queue_wait_seconds_count")]
        assert sum(float(ln.split()[-1]) for ln in waits) >= 7  # all but the first request were held
        loaded = next(ln for ln in metrics.splitlines() if ln.startswith('orchestrator_loaded_bytes{device="cpu"}'))
        assert float(loaded.split()[-1]) == lc.models[second].need["cpu"]
        assert 'orchestrator_queued_requests{model="a"} 0.0' in metrics
    finally:
        stack.close()


def test_a_model_with_a_stream_in_flight_is_never_evicted(tmp_path: Path, bin_info: Any, tiny: list[Path]) -> None:
    stack = lifecycle_stack(
        tmp_path, bin_info,
        [{"name": "a", "path": str(tiny[0]), "ctx_size": 4096}, {"name": "b", "path": str(tiny[1])}],
    )  # fmt: skip
    need = {name: m.need["cpu"] for name, m in stack.scheduler.models.items()}
    stack.scheduler.budget.overrides = {"cpu": need["a"] + need["b"] - 1}  # room for either, not both
    try:
        long = chat("a", "count", max_tokens=3000, stream=True)
        with httpx.Client(timeout=120) as client:
            with client.stream("POST", stack.url + "/v1/chat/completions", json=long) as s:
                lines = s.iter_lines()
                first = next(ln for ln in lines if ln.startswith("data: "))
                assert first.startswith("data: {")
                a_pid = pids(stack, "a")[0]
                # b arrives while a streams (and we stop reading, so the stream stays in flight)
                other = httpx.AsyncClient(timeout=120)
                pending = stack.run(_post_later(other, stack.url, chat("b")))
                wait_until("b's request to be held", lambda: stack.scheduler.models["b"].waiters)
                wait_until("a to close for b (later requests held)", lambda: stack.scheduler.models["a"].closing)
                seen = stack.scheduler.decisions
                wait_until("a few more lifecycle decisions", lambda: stack.scheduler.decisions > seen + 5)
                assert state(stack, "a") is ModelState.READY and pids(stack, "a") == [a_pid]
                assert state(stack, "b") is ModelState.UNLOADED and stack.scheduler.swaps == 0
                rest = [ln for ln in lines if ln]
            errors = [ln for ln in rest if ln.startswith('data: {"error"')]
            assert rest[-1] == "data: [DONE]" and not errors, errors
        answer = stack.run(_result(pending))
        assert answer.status_code == 200, answer.text
        stack.run(other.aclose())
        assert stack.scheduler.models["a"].evictions == 1 and state(stack, "b") is ModelState.READY
    finally:
        stack.close()


async def _result(task: asyncio.Task[httpx.Response]) -> httpx.Response:
    return await task


async def _post_later(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> asyncio.Task[httpx.Response]:
    return asyncio.get_running_loop().create_task(client.post(url + "/v1/chat/completions", json=body))


def test_ttl_unloads_an_idle_model_and_a_pinned_model_stays(tmp_path: Path, bin_info: Any, tiny: list[Path]) -> None:
    stack = lifecycle_stack(
        tmp_path, bin_info,
        [{"name": "a", "path": str(tiny[0]), "ttl": 1}, {"name": "p", "path": str(tiny[1]), "ttl": 1, "pinned": True}],
        budget=room_for(2),
    )  # fmt: skip
    try:
        for name in ("a", "p"):
            assert httpx.post(stack.url + "/v1/chat/completions", json=chat(name), timeout=120).status_code == 200
        wait_until("a to unload after its TTL", lambda: state(stack, "a") is ModelState.UNLOADED, timeout=30)
        a = stack.scheduler.models["a"]
        assert a.loads == 1 and a.reason == "unloaded (ttl)" and pids(stack, "a") == [None]
        wait_until("p to be idle well past its TTL", lambda: _idle(stack, "p") > 3.0, timeout=30)
        assert state(stack, "p") is ModelState.READY
        row = next(r for r in httpx.get(stack.url + "/status").json()["models"] if r["model"] == "p")
        assert row["pinned"] and row["ttl_s"] is None and row["unload_in_s"] is None
    finally:
        stack.close()


def _idle(stack: Any, model: str) -> float:
    row = next(r for r in stack.scheduler.snapshot() if r["model"] == model)
    return float(row["idle_s"] or 0.0)


def test_a_model_that_crashes_while_loading_answers_its_waiting_requests_503(
    tmp_path: Path, bin_info: Any, tiny: list[Path]
) -> None:
    broken = tmp_path / "broken.gguf"
    data = tiny[0].read_bytes()
    broken.write_bytes(data)
    stack = lifecycle_stack(tmp_path, bin_info, [{"name": "broken", "path": str(broken)}], budget=room_for(2))
    broken.write_bytes(data[: len(data) // 2])  # cut short after planning: llama-server exits while loading

    async def three() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120) as client:
            return list(
                await asyncio.gather(
                    *(client.post(stack.url + "/v1/chat/completions", json=chat("broken")) for _ in range(3))
                )
            )

    try:
        started = time.monotonic()
        answers = asyncio.run(three())
        assert time.monotonic() - started < 20
        for r in answers:  # no Retry-After: the same load would fail again
            assert r.status_code == 503 and "retry-after" not in r.headers
            error = r.json()["error"]
            assert error["code"] in ("model_load_failed", "model_unavailable")  # the last may come after
            assert "broken-0" in error["message"] and "while loading" in error["message"]
        assert state(stack, "broken") is ModelState.FAILED and pids(stack, "broken") == [None]
        loads = stack.scheduler.decisions
        later = httpx.post(stack.url + "/v1/chat/completions", json=chat("broken"), timeout=30)
        assert later.status_code == 503 and later.json()["error"]["code"] == "model_unavailable"
        assert "orchestrator load broken" in later.json()["error"]["message"] and stack.scheduler.decisions > loads
        assert state(stack, "broken") is ModelState.FAILED  # a request does not reload a broken model
        broken.write_bytes(data)  # a person fixes the file and asks again
        again = httpx.post(stack.url + "/models/load", json={"model": "broken"}, timeout=120)
        assert again.status_code == 200 and again.json()["state"] == "ready"
    finally:
        stack.close()


def test_load_and_unload_routes_and_errors(tmp_path: Path, bin_info: Any, tiny: list[Path]) -> None:
    stack = lifecycle_stack(
        tmp_path, bin_info,
        [{"name": "a", "path": str(tiny[0]), "aliases": ["alpha"]}, {"name": "b", "path": str(tiny[1])}],
        budget=room_for(1),
    )  # fmt: skip
    try:
        r = httpx.post(stack.url + "/models/load", json={"model": "alpha"}, timeout=120)
        assert r.status_code == 200 and r.json()["state"] == "ready" and r.json()["model"] == "a"
        r = httpx.post(stack.url + "/models/load", json={"model": "b"}, timeout=120)  # evicts a (idle)
        assert r.status_code == 200 and r.json()["state"] == "ready"
        assert state(stack, "a") is ModelState.UNLOADED and stack.scheduler.swaps == 1
        r = httpx.post(stack.url + "/models/unload", json={"model": "b"}, timeout=120)
        assert r.status_code == 200 and r.json()["state"] == "unloaded" and pids(stack, "b") == [None]
        assert (
            httpx.post(stack.url + "/models/load", json={"model": "nope"}).json()["error"]["code"] == "model_not_found"
        )
        assert httpx.post(stack.url + "/models/load", json={}).status_code == 400
        c = openai.OpenAI(base_url=stack.url + "/v1", api_key="none")
        assert {m.id: (m.model_extra or {})["state"] for m in c.models.list().data}["b"] == "unloaded"
    finally:
        stack.close()


def test_a_model_too_large_for_the_budget_gets_503_with_the_numbers(
    tmp_path: Path, bin_info: Any, tiny: list[Path]
) -> None:
    stack = lifecycle_stack(tmp_path, bin_info, [{"name": "a", "path": str(tiny[0])}], budget=2**20)
    try:
        r = httpx.post(stack.url + "/v1/chat/completions", json=chat("a"), timeout=30)
        assert r.status_code == 503
        error = r.json()["error"]
        assert error["code"] == "model_too_large" and "1.0 MiB" in error["message"] and "10.2 MiB" in error["message"]
        assert pids(stack, "a") == [None]
    finally:
        stack.close()


def test_queue_limit_answers_429_with_retry_after(tmp_path: Path, bin_info: Any, tiny: list[Path]) -> None:
    stack = lifecycle_stack(
        tmp_path, bin_info, [{"name": "a", "path": str(tiny[0]), "queue_limit": 1}], budget=room_for(1)
    )

    async def two() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120) as client:
            first = asyncio.ensure_future(client.post(stack.url + "/v1/chat/completions", json=chat("a")))
            while not stack.scheduler.models["a"].waiters:
                await asyncio.sleep(0.01)
            second = await client.post(stack.url + "/v1/chat/completions", json=chat("a"))
            return [await first, second]

    try:
        first, second = stack.run(two())
        assert first.status_code == 200
        assert second.status_code == 429 and int(second.headers["retry-after"]) >= 1
        assert second.json()["error"]["code"] == "queue_full"
    finally:
        stack.close()
