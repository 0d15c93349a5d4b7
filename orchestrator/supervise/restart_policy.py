"""When to restart a crashed llama-server, after how long, and when to give up: pure rules.

Two kinds of crash are told apart by whether the child had reached ready:

- **before ready** (it died while loading): the same launch is likely to die again (a bad
  file, too little memory, a wrong flag). These count toward the crash loop: ``count`` of
  them within ``window`` seconds and the instance gives up (FAILED), because retrying cannot
  help and only burns the log.
- **after ready** (it served, then died or stalled): the launch works; something at run time
  killed it (an OOM killer, a driver reset, a request that froze it). These never give up:
  the model keeps being restarted, at most ``backoff_max`` seconds apart, so one bad period
  can never lock a model out until someone restarts it by hand.

The backoff follows the *streak* of crashes without a stable period in between: the first
crash of a streak restarts at once (an isolated crash costs one load time), then
``backoff_base`` seconds, doubling, capped at ``backoff_max``. A child that served for
``stable_after`` seconds ends the streak, so the next crash is isolated again.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RestartRules:
    """The restart policy's numbers (seconds unless noted).

    Attributes:
        backoff_base: delay before the second restart of a streak; doubles per further crash.
        backoff_max: the longest delay between restarts.
        crash_loop_count: crashes before ready within ``crash_loop_window`` that mean FAILED.
        crash_loop_window: seconds over which crashes before ready are counted.
        stable_after: seconds of serving after which a crash starts a new streak (delay 0).
    """

    backoff_base: float = 1.0
    backoff_max: float = 60.0
    crash_loop_count: int = 5
    crash_loop_window: float = 60.0
    stable_after: float = 30.0


@dataclass(frozen=True)
class CrashVerdict:
    """What to do after one crash.

    Attributes:
        recent: crashes before ready within the window (this one included, if it was one).
        streak: crashes since the last stable period (this one included).
        crash_loop: True when the instance should give up (FAILED): only for crashes before ready.
        delay: seconds to wait before the restart.
        load_failures: launches in a row that ended before ready, this one included (0 when
            the child had been ready; counted by ``orchestrator.supervise.load_failures``).
        load_limit: True when ``load_failures`` reached ``SupervisorPolicy.load_failure_limit``.
    """

    recent: int
    streak: int
    crash_loop: bool
    delay: float
    load_failures: int = 0
    load_limit: bool = False


@dataclass
class CrashHistory:
    """One instance's crash history; ``record`` is the only thing that changes it.

    Attributes:
        early: monotonic times (s) of crashes before ready within the window.
        streak: crashes since the last stable period.
    """

    early: list[float] = field(default_factory=list)
    streak: int = 0

    def record(self, now: float, served_for: float | None, rules: RestartRules) -> CrashVerdict:
        """Account a crash at monotonic time ``now`` and decide.

        Args:
            now: monotonic time of the crash (seconds).
            served_for: seconds the crashed child had been serving (ready or degraded), or
                None when it crashed before it was ever ready.
            rules: the numbers.

        Returns:
            The verdict: restart after ``delay`` seconds, or give up (``crash_loop``).
        """
        if served_for is not None and served_for >= rules.stable_after:
            self.streak = 0
        self.streak += 1
        self.early = [t for t in self.early if now - t <= rules.crash_loop_window]
        if served_for is None:
            self.early.append(now)
        recent = len(self.early)
        crash_loop = served_for is None and recent >= rules.crash_loop_count
        return CrashVerdict(recent=recent, streak=self.streak, crash_loop=crash_loop, delay=backoff(self.streak, rules))

    def clear(self) -> None:
        """Forget everything (a manual start after FAILED)."""
        self.early.clear()
        self.streak = 0


def backoff(streak: int, rules: RestartRules) -> float:
    """Seconds before the restart after the ``streak``-th crash of a streak (1-based).

    0 for the first (an isolated crash restarts at once), then ``backoff_base * 2 ** (streak - 2)``
    capped at ``backoff_max``: 0, 1, 2, 4, ... 60 with the defaults.
    """
    if streak <= 1:
        return 0.0
    return float(min(rules.backoff_max, rules.backoff_base * 2.0 ** min(streak - 2, 64)))


def can_recover(state: str) -> bool:
    """Whether a model whose best replica is in ``state`` will serve again without anyone acting.

    True for ``loading``, ``restarting`` (and the serving states): a client may retry, so a 503
    for them carries ``Retry-After``. False for ``failed`` and ``stopped``: a ``Retry-After``
    would only make clients retry something that cannot succeed until a person acts.
    """
    return state in ("loading", "restarting", "ready", "degraded")
