"""Load failures before the first ready end in FAILED, whatever their timing (a time-scaled run of
a 23 GB model that reads its weights for ~20 s and then runs out of GPU memory, again and again)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from supervision_helpers import fake_spec, fast_policy, make_config, wait_state

from orchestrator.supervise.lifecycle import Lifecycle
from orchestrator.supervise.states import ProcessState, SupervisorPolicy
from orchestrator.supervise.supervisor import Supervisor


def test_slow_load_failures_end_in_failed_not_an_endless_restart(tmp_path: Path) -> None:
    """Scaled 1:50 from production: a 20 s load that fails (0.4 s here), backoff 1 s doubling to
    60 s (0.02 -> 1.2 s), crash loop = 5 crashes in 60 s (1.2 s). The crashes are too far apart
    for the crash-loop rule, which restarted it 31 times in 15 minutes; the load-failure limit
    gives up after 3 launches that never became ready."""

    async def main() -> None:
        policy = fast_policy(
            backoff_base=0.02, backoff_max=1.2, crash_loop_window=1.2, crash_loop_count=5, poll_interval=0.05
        )
        spec = fake_spec("--exit-after", "0.4", "--exit-code", "1")
        sup = Supervisor([spec], make_config(), log_dir=tmp_path, policy=policy)
        inst = sup.instances[0]
        await sup.start()
        try:
            await wait_state(inst, {ProcessState.FAILED}, timeout=60)
        finally:
            await sup.stop(3)
        assert (tmp_path / "demo-0.log").read_text().count("===== orchestrator: launch #") == policy.load_failure_limit
        message = inst.message or ""
        assert f"failed to load {policy.load_failure_limit} times in a row" in message
        assert "out of memory" in message  # the cause, from the log
        assert inst.exit_code == 1

    asyncio.run(main())


def test_being_ready_once_clears_the_load_failure_count() -> None:
    """Failures count only in a row while loading: a ready in between starts the count again,
    and a crash while serving is not a load failure."""
    policy = SupervisorPolicy(load_failure_limit=3, crash_loop_count=100)
    life = Lifecycle(lambda: None, policy.load_failure_limit)
    life.transition(ProcessState.LOADING)
    assert life.crashed(1, policy).load_failures == 1
    assert life.crashed(1, policy).load_failures == 2
    life.transition(ProcessState.READY)
    assert life.crashed(1, policy).load_failures == 0  # crashed while serving
    life.transition(ProcessState.LOADING)
    first, second = life.crashed(1, policy), life.crashed(1, policy)
    assert (first.load_failures, first.load_limit) == (1, False)
    assert (second.load_failures, second.load_limit) == (2, False)
    assert life.crashed(1, policy).load_limit
    life.forget_crashes()  # a manual start() after FAILED
    assert life.crashed(1, policy).load_failures == 1


def test_a_load_printing_only_dots_is_alive(tmp_path: Path) -> None:
    """llama.cpp prints its tensor-loading progress as dots without a newline: a slow disk's
    long load is output all the same, so the quiet load timeout must not kill it (it did:
    only complete lines counted)."""

    async def main() -> None:
        # loads for 3x the quiet timeout, well inside the cap (1.5 s x 5), printing a dot every 0.2 s
        sup = Supervisor(
            [fake_spec("--load-seconds", "4.5", "--dots")],
            make_config(load=1.5),
            log_dir=tmp_path,
            policy=fast_policy(load_cap_factor=5.0, poll_interval=0.1),
        )
        await sup.start()
        try:
            assert await sup.wait_all_ready(timeout=30), sup.instances[0].message
        finally:
            await sup.stop(3)
        assert "..... done" in (tmp_path / "demo-0.log").read_text()

    asyncio.run(main())
