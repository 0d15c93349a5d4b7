"""Progress, not liveness: a busy slot that never advances is recovered in seconds.

The pure part (``supervise/progress.py``) on literal ``/slots`` answers, then an injected livelock:
a child (``fake_llama_server.py --livelock N``) that answers ``/health`` and ``/slots`` but whose
busy slot's counters never move, behind the real proxy. The watch cancels the request on the stuck
slot and the proxy sends it again (a cancel); a slot still stuck after that gets the child restarted
(the last resort). ``/status`` and ``/metrics`` count both.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from proxy_harness import Stack
from supervision_helpers import fake_spec, fast_policy

from orchestrator.config.schema import Config, ModelConfig, ServerConfig, Timeouts
from orchestrator.supervise.calls import Call, Calls
from orchestrator.supervise.progress import STEP_FACTOR, NoProgress, ProgressWatch, SlotMark, busy_slots
from orchestrator.supervise.states import Outcome


def slots(*busy: tuple[int, int, int, int, str | None]) -> list[dict[str, object]]:
    """A ``/slots`` answer: (slot, task, processed, decoded, request id) per busy slot, slot 3 idle."""
    out: list[dict[str, object]] = [{"id": 3, "is_processing": False}]
    for slot, task, processed, decoded, rid in busy:
        params = {"id_request": rid} if rid is not None else {}
        out.append({"id": slot, "is_processing": True, "id_task": task, "n_prompt_tokens_processed": processed,
                    "next_token": [{"n_decoded": decoded}], "params": params})  # fmt: skip
    return out


def test_busy_slots_reads_the_marks_of_busy_slots_only() -> None:
    marks = busy_slots(slots((0, 7, 12, 3, "r1"), (1, 8, 0, 0, None)))
    assert marks == {0: SlotMark(7, 12, 3, "r1"), 1: SlotMark(8, 0, 0, None)}
    assert busy_slots({"error": "x"}) == {} and busy_slots(None) == {}


def test_a_slot_that_advances_is_never_stuck_and_one_that_does_not_is_after_the_limit() -> None:
    watch = ProgressWatch(no_progress=5)
    for t in range(20):  # slot 0 decodes a token a second; slot 1 never moves
        stuck = watch.observe(busy_slots(slots((0, 1, 10, t, None), (1, 2, 0, 0, None))), float(t))
        assert all(s.slot == 1 for s in stuck)
        assert bool(stuck) == (t >= 5), (t, stuck)
    assert "slot 1" in stuck[0].describe() and "no progress" in stuck[0].describe()


def test_a_child_with_slow_steps_gets_a_longer_limit() -> None:
    watch = ProgressWatch(no_progress=2)
    watch.observe(busy_slots(slots((0, 1, 0, 0, None))), 0.0)
    watch.observe(busy_slots(slots((0, 1, 512, 0, None))), 10.0)  # one prefill batch took 10 s
    assert watch.limit == 10.0 * STEP_FACTOR
    assert watch.observe(busy_slots(slots((0, 1, 512, 0, None))), 29.0) == []
    assert watch.observe(busy_slots(slots((0, 1, 512, 0, None))), 40.5)


def test_a_slot_that_went_idle_starts_afresh() -> None:
    watch = ProgressWatch(no_progress=1)
    watch.observe(busy_slots(slots((0, 1, 5, 0, None))), 0.0)
    watch.observe(busy_slots(slots()), 5.0)
    assert watch.observe(busy_slots(slots((0, 1, 5, 0, None))), 5.5) == []


def test_no_progress_cancels_the_request_first_and_restarts_when_that_does_not_help() -> None:
    async def go() -> None:
        calls, lines = Calls(), []
        recovery = NoProgress(calls, 1.0, lines.append)

        async def opened() -> Call:
            return calls.open(None)  # in a task of its own, as a request is: abandoning it cancels that task

        call = await asyncio.create_task(opened())
        payload = slots((0, 5, 0, 0, call.id))
        assert recovery.on_slots(payload, 0.0) is None and call.started
        assert recovery.on_slots(payload, 1.5) is None  # stuck: its request is abandoned
        assert call.reason is not None and recovery.cancels == 1
        end = recovery.on_slots(payload, 3.0)  # the same task, still stuck: restart
        assert end is not None and end.outcome is Outcome.STALLED and recovery.restarts == 1
        assert "restarted" in lines[-1]

    asyncio.run(go())


def test_a_call_never_seen_in_a_slot_did_not_start() -> None:
    async def go() -> None:
        calls = Calls()
        a, b = calls.open(None), calls.open(1)
        assert calls.started(a) is None  # the child has shown no request ids yet: unknown
        calls.seen(busy_slots(slots((0, 1, 1, 0, a.id))))
        assert calls.started(a) is True and calls.started(b) is False
        assert calls.on_slot(1, SlotMark(2, 0, 0, None)) is b  # an unpatched child: found by its pinned slot

    asyncio.run(go())


@pytest.fixture
def livelocked(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    n = request.param
    server = ServerConfig(timeouts=Timeouts(no_progress=1.0, first_byte=120))
    config = Config(server=server, models=[ModelConfig(name="demo", path="/unused.gguf")])
    s = Stack(config, [fake_spec("--livelock", str(n))], tmp_path / "logs", policy=fast_policy())
    yield s
    s.close()


def chat(stack: Stack) -> httpx.Response:
    return httpx.post(stack.url + "/v1/chat/completions", timeout=60,
                      json={"model": "demo", "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip


def status(stack: Stack) -> dict[str, object]:
    row: dict[str, object] = httpx.get(stack.url + "/status", timeout=10).json()["instances"][0]
    return row


@pytest.mark.parametrize("livelocked", [1], indirect=True)
def test_an_injected_livelock_costs_seconds_the_request_is_cancelled_and_sent_again(livelocked: Stack) -> None:
    started = time.monotonic()
    r = chat(livelocked)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "ok"
    assert time.monotonic() - started < 15
    row = status(livelocked)
    assert row["no_progress"] == {"cancels": 1, "restarts": 0}, row
    assert row["restarts"] == 0
    metrics = httpx.get(livelocked.url + "/metrics", timeout=10).text
    assert 'orchestrator_instance_no_progress_total{action="cancel",instance="demo-0",model="demo"} 1.0' in metrics


@pytest.mark.parametrize("livelocked", [2], indirect=True)
def test_a_slot_still_stuck_after_the_cancel_gets_the_child_restarted(livelocked: Stack) -> None:
    started = time.monotonic()
    r = chat(livelocked)
    # the resent request was in the stuck slot when the child was restarted: not sent a third time
    assert r.status_code == 502, r.text
    assert time.monotonic() - started < 20
    deadline = time.monotonic() + 30
    while (row := status(livelocked))["state"] != "ready" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert row["no_progress"] == {"cancels": 1, "restarts": 1}, row
    assert row["restarts"] == 1 and "no progress" in " ".join(row["warnings"])  # type: ignore[arg-type]
