"""Lifecycle states of a supervised llama-server, their groups, the loop's typed outcomes, and timing rules.

What each public call and event does in each state (after llama-swap ``process.go``). Each
``Instance`` has one writer of its state, ``Lifecycle.transition``, called only by its lifecycle
task (and once by ``start()``, before that task exists):

====================  ========  ======================  ==================  ===============  ==================
call / event          STOPPED   LOADING                 READY / DEGRADED    RESTARTING       FAILED
====================  ========  ======================  ==================  ===============  ==================
``start()``           spawn ->  no-op                   no-op               no-op            respawn -> LOADING
                      LOADING                                                                (crash history
                                                                                             cleared)
``stop(grace)``       no-op     SIGTERM group, SIGKILL  same -> STOPPED     cancel backoff   no-op (no process)
                                after grace -> STOPPED                      -> STOPPED
``Supervisor.pick``   never     never                   eligible unless     never            never
                                                        unresponsive (2)
``wait_for_replica``  None (1)  waits                   returns it          waits            None (1)
child exits           --        crash: RESTARTING       RESTARTING (never   --               --
                                (backoff) or FAILED     FAILED: see (3))
                                (crash loop, or the
                                load-failure limit)
/health 200 + ok      --        verify /props -> READY  --                  --               --
                                (DEGRADED without
                                spec), FAILED on
                                mismatch or a GPU
                                instance on the CPU
load timeout          --        kill -> FAILED + log    --                  --               --
                                tail
stall (no /slots      --        --                      SIGKILL ->          --               --
answer)                                                 RESTARTING
spec fallback         --        kill -> LOADING         same                applied at next  --
request                         without spec flags                          launch
                                -> DEGRADED
====================  ========  ======================  ==================  ===============  ==================

(1) ``wait_for_replica(model)`` returns None at once only when *every* replica of the model
is STOPPED or FAILED; otherwise it waits for the others.
(2) a serving child whose main loop answered nothing for ``unresponsive_after`` s.
(3) only crashes before ready count toward the crash loop; the backoff restarts after a stable
period (``orchestrator.supervise.restart_policy``).

``SERVING``/``STARTING``/``TERMINAL``/``RUNNING`` group the states the way callers ask about them.
``Outcome``/``PhaseEnd`` are how a phase of the lifecycle loop (wait ready, watch, backoff) ends, and
what is queued to the loop (stop, relaunch without speculation). ``SupervisorPolicy`` holds every
interval, deadline and threshold; tests shrink it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from orchestrator.supervise.restart_policy import RestartRules


class ProcessState(enum.Enum):
    """Lifecycle of one supervised llama-server; the module docstring has the lifecycle table."""

    STOPPED = "stopped"
    LOADING = "loading"
    READY = "ready"
    DEGRADED = "degraded"  # serving, but without speculation after a fallback
    RESTARTING = "restarting"  # waiting out the backoff after a crash
    FAILED = "failed"  # gave up: load timeout, identity mismatch, not on the GPU, crash loop, cannot exec


SERVING = frozenset({ProcessState.READY, ProcessState.DEGRADED})  # may receive requests
STARTING = frozenset({ProcessState.LOADING, ProcessState.RESTARTING})  # will serve without anyone acting
TERMINAL = frozenset({ProcessState.STOPPED, ProcessState.FAILED})  # no process, no lifecycle task
RUNNING = frozenset({ProcessState.LOADING, ProcessState.READY, ProcessState.DEGRADED})  # a child exists


class Outcome(enum.Enum):
    """How one phase of the lifecycle loop ended, or what was asked of the loop."""

    READY = "ready"  # /health ok and /props confirms our model
    STOP = "stop"  # asked to stop (Instance.stop)
    RELAUNCH_WITHOUT_SPEC = "relaunch_without_spec"  # asked by the drafting watch (spec_fallback)
    EXITED = "exited"  # the child exited by itself
    TIMEOUT = "timeout"  # not ready within the load deadline
    MISMATCH = "mismatch"  # the server on the port is not our child serving our model
    NOT_ON_GPU = "not_on_gpu"  # a GPU instance whose server loaded on the CPU (no usable GPU)
    STALLED = "stalled"  # the main loop answered nothing (no /slots answer) for stall_timeout
    WORKER_LOST = "worker_lost"  # an RPC worker of the server went away (supervise/rpc_workers.py)


@dataclass(frozen=True)
class PhaseEnd:
    """One phase's end: the outcome, why (for FAILED / RESTARTING messages) and the stop grace.

    Attributes:
        outcome: what happened.
        detail: one human-readable reason (timeout, mismatch and stall carry one), or None.
        grace: seconds between SIGTERM and SIGKILL when the child is stopped; None means the
            policy's ``stop_grace``.
    """

    outcome: Outcome
    detail: str | None = None
    grace: float | None = None


@dataclass(frozen=True)
class SupervisorPolicy:
    """Timing rules of the supervisor (seconds unless noted). Tests shrink them."""

    poll_interval: float = 0.25  # /health poll while loading
    watch_interval: float = 1.0  # /health poll while serving
    health_timeout: float = 2.0  # one /health request
    # llama-server's main loop answers /slots between two batches; none for this long -> kill, restart.
    # One batch (n_batch 2048 prompt tokens, or one decode step of every slot) takes under 2 s on a
    # GPU for the target model and well under 30 s on CPU; a longer silence is a stuck loop.
    stall_timeout: float = 30.0
    unresponsive_after: float = 10.0  # no answer this long: /health not ok, no new requests routed
    backoff_base: float = 1.0  # second restart delay of a streak (the first is immediate); doubles
    backoff_max: float = 60.0
    crash_loop_count: int = 5  # this many crashes before ready ...
    crash_loop_window: float = 60.0  # ... within this many seconds -> FAILED
    load_failure_limit: int = 3  # launches in a row that end before ready -> FAILED, whatever their timing
    stable_after: float = 30.0  # serving this long ends a crash streak (next crash restarts at once)
    load_cap_factor: float = 3.0  # log output extends the load deadline up to this multiple
    stop_grace: float = 10.0  # SIGTERM -> SIGKILL for internal kills (stall, fallback, failure)
    exit_drain: float = 1.0  # after an exit, wait this long for the last log lines
    tail_lines: int = 500  # in-memory log tail (lines)
    draft_check_after: int = 3  # generations before "speculation inactive" is decided
    acceptance_window: int = 2000  # rolling acceptance over the last this many drafted tokens
    acceptance_min_drafted: int = 500  # judge acceptance only over at least this many drafted tokens
    spec_batch_failures: int = 3  # consecutive speculative-batch failures -> relaunch without spec

    def restart_rules(self) -> RestartRules:
        """The restart numbers as ``orchestrator.supervise.restart_policy`` takes them."""
        return RestartRules(
            backoff_base=self.backoff_base,
            backoff_max=self.backoff_max,
            crash_loop_count=self.crash_loop_count,
            crash_loop_window=self.crash_loop_window,
            stable_after=self.stable_after,
        )
