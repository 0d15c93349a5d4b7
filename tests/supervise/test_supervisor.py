"""The supervisor against a real llama-server on the tiny model, and against the fake server
where a fault has to be injected (cases S01, S02, S03, S05 of tests/data/supervisor_events.md)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import httpx
import psutil
import pytest
from supervision_helpers import (
    chat_body,
    fake_spec,
    fast_policy,
    gone,
    make_config,
    real_spec,
    wait_state,
    wait_until,
)

from orchestrator.config.schema import SpeculativeConfig
from orchestrator.supervise.child_io import ChildProbe
from orchestrator.supervise.readiness import Health, classify_health, failure_lines, parse_listening_port
from orchestrator.supervise.supervisor import SERVING, Instance, ProcessState, Supervisor

# --------------------------------------------------------------------------- pure readers


def test_health_answers_map_to_states() -> None:
    assert classify_health(503, b'{"error":{"message":"Loading model"}}') is Health.LOADING
    assert classify_health(200, b'{"status":"ok"}') is Health.READY
    # older builds answered 200 while loading
    assert classify_health(200, b'{"status":"loading model"}') is Health.LOADING
    assert classify_health(500, b"") is Health.ERROR
    assert classify_health(None, b"") is Health.UNREACHABLE


def test_listening_line_and_failure_lines() -> None:
    assert parse_listening_port("main: server is listening on http://127.0.0.1:40123") == 40123
    assert parse_listening_port("srv  main: listening on http://[::1]:8081") == 8081
    assert parse_listening_port("load_tensors: loading model tensors") is None
    log = [
        "build: 1 (0c1e570)",
        "llama_model_load: error loading model: no such file",
        "main: exiting due to model loading error",
    ]
    assert failure_lines(log) == log[1:]


# --------------------------------------------------------------------------- S01 readiness


def test_s01_stays_loading_until_health_ok_while_v1_models_answers(tmp_path: Path) -> None:
    """/v1/models answering 200 must not count as ready; a held request gets the instance only once ready."""

    async def main() -> None:
        ready_file = tmp_path / "loaded"  # the fake stays loading until the test creates it
        spec = fake_spec("--ready-file", str(ready_file))
        sup = Supervisor([spec], make_config(), log_dir=tmp_path, policy=fast_policy())
        inst = sup.instances[0]
        await sup.start()
        try:
            held = asyncio.ensure_future(sup.wait_for_replica("demo", timeout=60))
            await wait_until(lambda: inst.base_url is not None, 30, "the port of the loading child is known")
            async with httpx.AsyncClient(trust_env=False) as client:
                models = await client.get(f"{inst.base_url}/v1/models")
                health = await client.get(f"{inst.base_url}/health")
            assert models.status_code == 200 and health.status_code == 503
            await asyncio.sleep(3 * fast_policy().poll_interval)  # several /health polls answered 503
            assert inst.state is ProcessState.LOADING
            assert sup.pick("demo") is None
            assert not held.done()
            ready_file.touch()
            got = await held
            assert got is inst and inst.state is ProcessState.READY
        finally:
            await sup.stop(3)
        assert inst.state is ProcessState.STOPPED

    asyncio.run(main())


def test_s01_load_timeout_fails_with_log_tail(tmp_path: Path) -> None:
    async def main() -> None:
        sup = Supervisor(
            [fake_spec("--load-seconds", "-1", "--quiet")],
            make_config(load=3.0),  # room for the fake's own start (it logs "starting" first)
            log_dir=tmp_path,
            policy=fast_policy(),
        )
        inst = sup.instances[0]
        await sup.start()
        try:
            await wait_state(inst, {ProcessState.FAILED}, timeout=20)
        finally:
            await sup.stop(3)
        assert "load timeout" in (inst.message or "")
        assert "fake llama-server: starting" in (inst.message or "")  # the last log lines are shown
        assert inst.pid is not None and gone(inst.pid)
        row = sup.snapshot()[0]
        assert row["state"] == "failed" and row["log_tail"]
        assert "fake llama-server: starting" in (tmp_path / "demo-0.log").read_text()
        # a replica that cannot recover releases held requests at once
        assert await sup.wait_for_replica("demo", timeout=30) is None

    asyncio.run(main())


def test_s01_load_deadline_extends_while_the_child_logs(tmp_path: Path) -> None:
    """A load longer than the timeout survives as long as the child keeps logging progress."""

    async def main() -> None:
        # loads for 3x the quiet timeout, well inside the cap (2 s x 5), logging every 0.2 s
        sup = Supervisor(
            [fake_spec("--load-seconds", "6")],
            make_config(load=2.0),
            log_dir=tmp_path,
            policy=fast_policy(load_cap_factor=5.0),
        )
        await sup.start()
        try:
            assert await sup.wait_all_ready(timeout=30), sup.instances[0].message
        finally:
            await sup.stop(3)

    asyncio.run(main())


@pytest.mark.native
@pytest.mark.slow
def test_s01_real_server_becomes_ready_and_answers(tmp_path: Path, bin_info, demo_model) -> None:
    async def main() -> None:
        spec = real_spec(bin_info.server, bin_info.lib_dir, demo_model)
        sup = Supervisor([spec], make_config(), log_dir=tmp_path, policy=fast_policy())
        inst = sup.instances[0]
        await sup.start()
        try:
            assert await sup.wait_all_ready(timeout=120), inst.message
            assert inst.base_url and inst.pid
            async with httpx.AsyncClient(trust_env=False, timeout=60) as client:
                assert (await client.get(f"{inst.base_url}/health")).json() == {"status": "ok"}
                resp = await client.post(f"{inst.base_url}/v1/chat/completions", json=chat_body())
            assert resp.status_code == 200
            assert resp.json()["choices"][0]["message"]["content"] is not None
            assert any("listening on" in line for line in inst.log_tail(200))
        finally:
            await sup.stop(5)
        assert gone(inst.pid)
        text = (tmp_path / "demo-0.log").read_text()
        assert "===== orchestrator: launch #1 of demo-0" in text

    asyncio.run(main())


# --------------------------------------------------------------------------- S02 identity


def test_s02_identity_mismatch_fails(tmp_path: Path) -> None:
    """A server on the port that reports another model is not ours: FAILED, clear message."""

    async def main() -> None:
        sup = Supervisor(
            [fake_spec("--props-alias", "someone-else")], make_config(), log_dir=tmp_path, policy=fast_policy()
        )
        inst = sup.instances[0]
        await sup.start()
        try:
            assert not await sup.wait_all_ready(timeout=30)
        finally:
            await sup.stop(3)
        assert inst.state is ProcessState.FAILED
        assert "'someone-else'" in (inst.message or "") and "expected 'demo'" in (inst.message or "")
        assert inst.pid is not None and gone(inst.pid)

    asyncio.run(main())


# --------------------------------------------------------------------------- S05 crashes


@pytest.mark.native
@pytest.mark.slow
def test_s05_kill_9_restarts_and_next_request_succeeds(tmp_path: Path, bin_info, demo_model) -> None:
    async def main() -> None:
        sup = Supervisor(
            [real_spec(bin_info.server, bin_info.lib_dir, demo_model)],
            make_config(),
            log_dir=tmp_path,
            policy=fast_policy(),
        )
        inst = sup.instances[0]
        seen: list[ProcessState] = []
        await sup.start()
        try:
            assert await sup.wait_all_ready(timeout=120), inst.message
            first = inst.pid
            assert first is not None
            first_proc = psutil.Process(first)
            watcher = asyncio.ensure_future(_record_states(inst, seen))
            os.kill(first, signal.SIGKILL)
            # an isolated crash restarts at once (no backoff), so RESTARTING may not be seen
            await wait_until(lambda: inst.restarts == 1, 30, "the killed child was restarted")
            assert any("killed by signal 9 (SIGKILL)" in w for w in inst.warnings)
            await wait_state(inst, SERVING, timeout=120)
            watcher.cancel()
            assert inst.pid != first and gone(first_proc)
            assert inst.restarts == 1
            assert ProcessState.LOADING in seen
            async with httpx.AsyncClient(trust_env=False, timeout=60) as client:
                resp = await client.post(f"{inst.base_url}/v1/chat/completions", json=chat_body())
            assert resp.status_code == 200
        finally:
            await sup.stop(5)
        assert "launch #2 of demo-0" in (tmp_path / "demo-0.log").read_text()

    asyncio.run(main())


async def _record_states(inst: Instance, seen: list[ProcessState]) -> None:
    while True:
        if not seen or seen[-1] is not inst.state:
            seen.append(inst.state)
        await asyncio.sleep(0.01)


@pytest.mark.native
@pytest.mark.slow
def test_s05_crash_loop_fails_with_exit_code_and_log_tail(tmp_path: Path, bin_info) -> None:
    """A child that exits at once (missing GGUF) is retried with backoff, then FAILED."""

    async def main() -> None:
        spec = real_spec(bin_info.server, bin_info.lib_dir, tmp_path / "missing.gguf")
        policy = fast_policy(crash_loop_count=3, backoff_base=0.1)
        sup = Supervisor([spec], make_config(), log_dir=tmp_path, policy=policy)
        inst = sup.instances[0]
        await sup.start()
        try:
            await wait_state(inst, {ProcessState.FAILED}, timeout=60)
        finally:
            await sup.stop(3)
        assert inst.restarts == 2  # 3 crashes: two restarts, then the crash loop verdict
        assert inst.exit_code not in (None, 0)
        assert "crash loop: 3 crashes" in (inst.message or "")
        assert "missing.gguf" in "\n".join(inst.log_tail(50))
        row = sup.snapshot()[0]
        assert row["exit_code"] == inst.exit_code and row["log_tail"]
        assert (tmp_path / "demo-0.log").read_text().count("===== orchestrator: launch #") == 3

    asyncio.run(main())


@pytest.mark.native
@pytest.mark.slow
def test_s05_stalled_child_is_killed_and_restarted(tmp_path: Path, bin_info, demo_model) -> None:
    """In flight + SIGSTOPped child (no /health, no output) -> killed and restarted."""

    async def main() -> None:
        policy = fast_policy(stall_timeout=1.5, health_timeout=0.5)
        sup = Supervisor(
            [real_spec(bin_info.server, bin_info.lib_dir, demo_model)], make_config(), log_dir=tmp_path, policy=policy
        )
        inst = sup.instances[0]
        await sup.start()
        try:
            assert await sup.wait_all_ready(timeout=120), inst.message
            first = inst.pid
            assert first is not None
            first_proc = psutil.Process(first)
            inst.in_flight += 1  # what the proxy does around an upstream request
            os.kill(first, signal.SIGSTOP)
            await wait_until(lambda: inst.restarts == 1, 30, "the stalled child was restarted")
            inst.in_flight -= 1
            assert gone(first_proc)
            assert any("stalled" in w for w in inst.warnings)
            await wait_state(inst, SERVING, timeout=120)
            assert inst.pid != first and inst.requests == 1
        finally:
            await sup.stop(5)

    asyncio.run(main())


def test_stop_terminates_a_loading_child(tmp_path: Path) -> None:
    async def main() -> None:
        sup = Supervisor([fake_spec("--load-seconds", "-1")], make_config(), log_dir=tmp_path, policy=fast_policy())
        inst = sup.instances[0]
        await sup.start()
        await wait_state(inst, {ProcessState.LOADING}, timeout=5)
        await wait_until(lambda: inst.pid is not None, 30, "the child was spawned")
        assert inst.pid is not None
        child = psutil.Process(inst.pid)
        await sup.stop(3)
        assert inst.state is ProcessState.STOPPED
        assert gone(child)

    asyncio.run(main())


# --------------------------------------------------------------------------- S03 drafting check


def _instance(tmp_path: Path, spec_type: str | None = "draft-mtp", **spec_cfg: object) -> Instance:
    config = make_config(speculative=SpeculativeConfig(**spec_cfg))  # type: ignore[arg-type]
    return Supervisor([fake_spec(spec_type=spec_type)], config, log_dir=tmp_path, policy=fast_policy()).instances[0]


def test_s03_speculation_inactive_when_nothing_is_drafted(tmp_path: Path) -> None:
    inst = _instance(tmp_path)
    assert inst.speculation == "unknown"
    for _ in range(3):
        inst.record_timings({"predicted_n": 16, "predicted_per_second": 40.0})
    assert inst.speculation == "inactive"
    assert any("speculation inactive" in w for w in inst.warnings)
    assert inst.decode_tps == 40.0
    inst.record_timings({"predicted_n": 16, "draft_n": 12, "draft_n_accepted": 9})
    assert inst.speculation == "active" and not inst.warnings
    assert inst.acceptance == 0.75


def test_s03_no_speculation_means_off(tmp_path: Path) -> None:
    inst = _instance(tmp_path, spec_type=None)
    for _ in range(5):
        inst.record_timings({"predicted_n": 16})
    assert inst.speculation == "off" and not inst.warnings


def test_s03_low_rolling_acceptance_warns(tmp_path: Path) -> None:
    inst = _instance(tmp_path, acceptance_floor=0.5)
    for _ in range(4):  # 400 drafted: too few to judge
        inst.record_timings({"predicted_n": 100, "draft_n": 100, "draft_n_accepted": 10})
    assert not inst.warnings
    inst.record_timings({"predicted_n": 100, "draft_n": 100, "draft_n_accepted": 10})
    assert any("below the floor 0.50" in w for w in inst.warnings)
    # the window forgets: 2000 well-accepted drafted tokens clear the warning
    for _ in range(20):
        inst.record_timings({"predicted_n": 100, "draft_n": 100, "draft_n_accepted": 95})
    rate, drafted = inst.rolling_acceptance
    assert rate is not None and rate > 0.9 and drafted <= 2100
    assert not inst.warnings


@pytest.mark.native
@pytest.mark.slow
def test_s03_real_drafting_is_detected(tmp_path: Path, bin_info, demo_model) -> None:
    """Real timings: with --spec-type draft-mtp on the MTP model -> active; a spec instance whose
    server does not draft (draft length 0 on its command line) -> inactive."""

    async def main() -> None:
        spec_on = real_spec(bin_info.server, bin_info.lib_dir, demo_model, name="demo-0", spec=True)
        # the spec says draft-mtp, but later flags on the command line (last one wins) draft nothing
        missing_flags = real_spec(
            bin_info.server,
            bin_info.lib_dir,
            demo_model,
            name="demo-1",
            spec=True,
            extra=("--spec-draft-n-max", "0", "--spec-draft-n-min", "0"),
        )
        sup = Supervisor([spec_on, missing_flags], make_config(), log_dir=tmp_path, policy=fast_policy())
        await sup.start()
        try:
            assert await sup.wait_all_ready(timeout=180), [i.message for i in sup.instances]
            # two servers on a shared 2-core machine: a 24-token answer once took over 120 s
            async with httpx.AsyncClient(trust_env=False, timeout=300) as client:
                for inst in sup.instances:
                    for n in range(3):
                        resp = await client.post(
                            f"{inst.base_url}/v1/chat/completions", json=chat_body(f"count {n}", 24)
                        )
                        assert resp.status_code == 200
                        inst.record_timings(resp.json()["timings"])
        finally:
            await sup.stop(5)
        on, off = sup.instances
        assert on.speculation == "active" and on.drafted > 0 and on.acceptance is not None
        assert off.speculation == "inactive" and any("speculation inactive" in w for w in off.warnings)

    asyncio.run(main())


def test_s03_spec_batch_failures_relaunch_without_speculation(tmp_path: Path) -> None:
    """Three 'failed to process speculative batch' log lines -> relaunch without spec flags, DEGRADED."""

    async def main() -> None:
        spec = fake_spec("--load-seconds", "0.2", "--spec-batch-failures", "3", spec_type="draft-mtp")
        sup = Supervisor([spec], make_config(), log_dir=tmp_path, policy=fast_policy())
        inst = sup.instances[0]
        await sup.start()
        try:
            await wait_state(inst, {ProcessState.DEGRADED}, timeout=30)
        finally:
            await sup.stop(3)
        assert "--spec-type" not in inst.spec.argv and inst.spec.spec_type is None
        assert inst.speculation == "off"
        assert any("speculative-batch failures" in w for w in inst.warnings)
        assert inst.restarts == 0  # a fallback relaunch is not a crash

    asyncio.run(main())


@pytest.mark.native
@pytest.mark.slow
def test_s03_acceptance_floor_relaunch_on_real_server(tmp_path: Path, bin_info, demo_model) -> None:
    """spec_fallback: relaunch_without_spec on a real MTP instance -> relaunched without speculation."""

    async def main() -> None:
        config = make_config(
            speculative=SpeculativeConfig(acceptance_floor=0.99, spec_fallback="relaunch_without_spec")
        )
        sup = Supervisor(
            [real_spec(bin_info.server, bin_info.lib_dir, demo_model, spec=True)],
            config,
            log_dir=tmp_path,
            policy=fast_policy(acceptance_min_drafted=1),
        )
        inst = sup.instances[0]
        await sup.start()
        try:
            assert await sup.wait_all_ready(timeout=120), inst.message
            async with httpx.AsyncClient(trust_env=False, timeout=120) as client:
                resp = await client.post(f"{inst.base_url}/v1/chat/completions", json=chat_body("hi", 32))
            timings = resp.json()["timings"]
            assert timings.get("draft_n", 0) > 0
            # the tiny echo model accepts ~0.9 per token; a floor of 0.99 is not met
            inst.record_timings(timings)
            await wait_state(inst, {ProcessState.DEGRADED}, timeout=120)
            assert "--spec-type" not in inst.spec.argv
            async with httpx.AsyncClient(trust_env=False, timeout=120) as client:
                resp = await client.post(f"{inst.base_url}/v1/chat/completions", json=chat_body("hi", 8))
            assert resp.status_code == 200 and not resp.json()["timings"].get("draft_n")
        finally:
            await sup.stop(5)

    asyncio.run(main())


def test_stop_during_backoff_ends_at_once(tmp_path: Path) -> None:
    """RESTARTING + stop(): the backoff is cancelled, no new child is spawned."""

    async def main() -> None:
        policy = fast_policy(backoff_base=30.0, backoff_max=60.0)
        sup = Supervisor([fake_spec("--exit-code", "3")], make_config(), log_dir=tmp_path, policy=policy)
        inst = sup.instances[0]
        await sup.start()
        # the first crash of a streak restarts at once; the second waits backoff_base
        await wait_until(lambda: "restarting in 30 s" in (inst.message or ""), 10, "the second crash backs off")
        assert inst.state is ProcessState.RESTARTING and inst.exit_code == 3
        await asyncio.wait_for(sup.stop(3), timeout=5)
        assert inst.state is ProcessState.STOPPED
        assert (tmp_path / "demo-0.log").read_text().count("===== orchestrator: launch #") == 2

    asyncio.run(main())


def test_main_loop_probe_falls_back_to_health_when_slots_is_refused(tmp_path: Path) -> None:
    """/slots refused (an --api-key in extra_args, --no-slots): the probe asks /health instead of
    reading the refusal as a stuck main loop (which would restart a healthy server every stall_timeout)."""

    async def main() -> None:
        sup = Supervisor([fake_spec("--slots-status", "401")], make_config(), log_dir=tmp_path, policy=fast_policy())
        inst = sup.instances[0]
        await sup.start()
        try:
            assert await sup.wait_all_ready(timeout=30), inst.message
            assert inst.base_url is not None
            probe = ChildProbe(1.0)
            try:
                assert await probe.main_loop_answers(inst.base_url) is Health.READY
            finally:
                await probe.aclose()
        finally:
            await sup.stop(3)

    asyncio.run(main())
