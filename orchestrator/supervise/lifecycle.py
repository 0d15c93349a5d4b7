"""The lifecycle record of one instance (state, counters, the one writer of state) and its inbox.

``Lifecycle`` holds what ``orchestrator status`` shows about a child's life (state, message,
pid, exit code, restarts, start and ready times) and the crash history that decides between a
restart with backoff and a crash-loop FAILED (the rules: ``orchestrator.supervise.restart_policy``).
``transition`` is the only place that assigns the state (see the lifecycle table in
``orchestrator.supervise.states``). ``Inbox`` is how the rest of the program asks the
lifecycle loop for something (stop, relaunch without speculation): the loop waits on it and
on the child's exit together.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import time
from collections.abc import Callable
from typing import Any

from orchestrator.supervise.load_failures import LoadFailures
from orchestrator.supervise.restart_policy import CrashHistory, CrashVerdict
from orchestrator.supervise.states import SERVING, Outcome, PhaseEnd, ProcessState, SupervisorPolicy


class Lifecycle:
    """State, message and counters of one supervised child; ``transition`` is the one writer of state.

    Read freely: ``state``, ``message`` (why it FAILED or is RESTARTING), ``pid`` (the current or
    last child), ``exit_code``, ``restarts``, ``started_at``/``ready_at`` (Unix time, seconds).

    Args:
        notify: called after every change that readers may wait on.
        load_failure_limit: launches in a row that end before ready before giving up
            (``SupervisorPolicy.load_failure_limit``).
    """

    def __init__(
        self, notify: Callable[[], None], load_failure_limit: int = SupervisorPolicy.load_failure_limit
    ) -> None:
        self._state = ProcessState.STOPPED
        self.message: str | None = None
        self.pid: int | None = None
        self.exit_code: int | None = None
        self.restarts = 0
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self._crashes = CrashHistory()
        self._serving_since: float | None = None  # monotonic; None until this child serves
        self.load_failures = LoadFailures(load_failure_limit)
        self._notify = notify

    @property
    def state(self) -> ProcessState:
        """The current state; changed only by ``transition``."""
        return self._state

    def transition(self, new: ProcessState, message: str | None = None) -> None:
        """Change state (called only from the lifecycle task, or by ``start()`` before it exists)."""
        self._state = new
        self.message = message
        if new in SERVING:
            self.ready_at = time.time()
            if self._serving_since is None:
                self._serving_since = time.monotonic()
            self.load_failures.ready()
        self._notify()

    def launching(self) -> None:
        """A new child is about to be spawned: forget the last one's pid and exit code."""
        self.exit_code = None
        self.pid = None

    def launched(self, pid: int) -> None:
        """The child ``pid`` was spawned just now."""
        self.pid = pid
        self.started_at = time.time()
        self.ready_at = None
        self._serving_since = None
        self._notify()

    def serving_for(self) -> float | None:
        """Seconds the current (or last) child has been serving; None if it never reached ready."""
        return None if self._serving_since is None else time.monotonic() - self._serving_since

    def crashed(self, exit_code: int | None, policy: SupervisorPolicy) -> CrashVerdict:
        """Account a crash (an exit or a stall) at the child's ``exit_code``; decide restart or give up.

        Only crashes before ready count toward the crash loop, and the backoff restarts after a
        stable period (``orchestrator.supervise.restart_policy``). A crash while LOADING also
        counts toward the load-failure limit (``LoadFailures``), which gives up on a model that
        never becomes ready however slowly it fails.
        """
        self.exit_code = exit_code
        loading = self._state is ProcessState.LOADING
        verdict = self._crashes.record(time.monotonic(), self.serving_for(), policy.restart_rules())
        if not loading:
            return verdict
        limit = self.load_failures.failed()
        return dataclasses.replace(verdict, load_failures=self.load_failures.count, load_limit=limit)

    def forget_crashes(self) -> None:
        """A manual ``start()`` after FAILED begins a new crash history (counters are kept)."""
        self._crashes.clear()
        self.load_failures.ready()


def describe_exit(code: int | None) -> str:
    """``-9`` -> ``"killed by signal 9 (SIGKILL)"``; ``1`` -> ``"exited with code 1"`` (Popen's convention)."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-code} ({name})"
    return f"exited with code {code}"


class Inbox:
    """What the lifecycle loop waits for: requests from outside (stop, relaunch without
    speculation) and the child's exit, as one wait with a timeout."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[PhaseEnd] = asyncio.Queue()
        self._get: asyncio.Task[PhaseEnd] | None = None

    def reset(self) -> None:
        """Drop requests meant for an earlier run (a new ``start()``)."""
        self._queue = asyncio.Queue()

    def put(self, request: PhaseEnd) -> None:
        """Queue a request (``Outcome.STOP`` with its grace, or ``Outcome.RELAUNCH_WITHOUT_SPEC``)."""
        self._queue.put_nowait(request)

    async def next(self, exited: asyncio.Task[int] | None, timeout: float) -> PhaseEnd | None:
        """Wait up to ``timeout`` s for a request or for ``exited`` to finish; None on a plain tick."""
        if self._get is None:
            self._get = asyncio.get_running_loop().create_task(self._queue.get())
        waits: set[asyncio.Task[Any]] = {self._get}
        if exited is not None:
            waits.add(exited)
        done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if self._get in done:
            request = self._get.result()
            self._get = None
            return request
        if exited is not None and exited in done:
            return PhaseEnd(Outcome.EXITED)
        return None

    def close(self) -> None:
        """Stop waiting for requests (the lifecycle task ends)."""
        if self._get is not None:
            self._get.cancel()
            self._get = None
