"""The restart policy on literal crash histories (``orchestrator.supervise.restart_policy``)."""

from __future__ import annotations

from orchestrator.supervise.restart_policy import CrashHistory, RestartRules, backoff, can_recover

RULES = RestartRules(backoff_base=1.0, backoff_max=60.0, crash_loop_count=5, crash_loop_window=60.0, stable_after=30.0)


def test_crashes_after_ready_never_give_up_and_back_off_to_the_cap() -> None:
    """Five kill -9 within a minute, each after a short healthy period: never FAILED (issue case)."""
    history = CrashHistory()
    verdicts = [history.record(now=10.0 * i, served_for=5.0, rules=RULES) for i in range(12)]
    assert not any(v.crash_loop for v in verdicts)
    assert [v.delay for v in verdicts[:8]] == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0]
    assert verdicts[-1].delay == 60.0  # keeps retrying at the cap
    assert all(v.recent == 0 for v in verdicts)


def test_a_stable_period_resets_the_backoff() -> None:
    history = CrashHistory()
    assert [history.record(float(i), 1.0, RULES).delay for i in range(4)] == [0.0, 1.0, 2.0, 4.0]
    isolated = history.record(100.0, served_for=RULES.stable_after, rules=RULES)
    assert isolated.delay == 0.0 and isolated.streak == 1  # an isolated crash restarts at once


def test_crashes_before_ready_within_the_window_are_a_crash_loop() -> None:
    history = CrashHistory()
    verdicts = [history.record(float(i), None, RULES) for i in range(5)]
    assert [v.crash_loop for v in verdicts] == [False, False, False, False, True]
    assert verdicts[-1].recent == 5


def test_crashes_before_ready_outside_the_window_do_not_add_up() -> None:
    history = CrashHistory()
    verdicts = [history.record(61.0 * i, None, RULES) for i in range(6)]
    assert not any(v.crash_loop for v in verdicts) and verdicts[-1].recent == 1


def test_crashes_after_ready_do_not_count_toward_the_loop_of_early_ones() -> None:
    history = CrashHistory()
    for i in range(4):
        history.record(float(i), None, RULES)
    assert not history.record(5.0, served_for=2.0, rules=RULES).crash_loop
    assert history.record(6.0, None, RULES).crash_loop  # the fifth crash before ready


def test_clear_forgets_the_history() -> None:
    history = CrashHistory()
    for i in range(4):
        history.record(float(i), None, RULES)
    history.clear()
    verdict = history.record(5.0, None, RULES)
    assert verdict.recent == 1 and verdict.delay == 0.0


def test_backoff_formula_and_recoverable_states() -> None:
    assert [backoff(n, RULES) for n in (0, 1, 2, 3, 100)] == [0.0, 0.0, 1.0, 2.0, 60.0]
    assert all(can_recover(s) for s in ("loading", "restarting", "ready", "degraded"))
    assert not any(can_recover(s) for s in ("failed", "stopped"))
