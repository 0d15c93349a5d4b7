"""Lifecycle states of a supervised llama-server, their groups, and the supervisor's timing rules.

``ProcessState``'s docstring is the lifecycle table: what each public call and event does in
each state. ``SERVING``/``STARTING``/``TERMINAL``/``RUNNING`` group the states the way callers
ask about them. ``SupervisorPolicy`` holds every interval, deadline and threshold; tests shrink it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ProcessState(enum.Enum):
    """Lifecycle of one supervised llama-server.

    What each public call does in each state (after llama-swap ``process.go``):

    ===================  =========  ==========================  ======================  ====================  ===========================
    call / event         STOPPED    LOADING                     READY / DEGRADED        RESTARTING            FAILED
    ===================  =========  ==========================  ======================  ====================  ===========================
    ``start()``          spawn ->   no-op                       no-op                   no-op                 respawn -> LOADING (counters
                         LOADING                                                                              kept, crash history cleared)
    ``stop(grace)``      no-op      SIGTERM group, SIGKILL      same -> STOPPED         cancel backoff ->     no-op (no process)
                                    after grace -> STOPPED                              STOPPED
    ``Supervisor.pick``  never      never                       eligible                never                 never
    ``wait_for_replica`` None (1)   waits                       returns it              waits                 None (1)
    child exits          --         crash: RESTARTING (backoff) same                    --                    --
                                    or FAILED (crash loop)
    /health 200 + ok     --         verify /props -> READY      --                      --                    --
                                    (DEGRADED without spec),
                                    or FAILED on mismatch
    load timeout         --         kill -> FAILED + log tail   --                      --                    --
    stall (in flight,    --         --                          kill -> RESTARTING      --                    --
    no /health, no log)
    spec fallback        --         kill -> LOADING without     same                    applied at next       --
    request                         spec flags -> DEGRADED                              launch
    ===================  =========  ==========================  ======================  ====================  ===========================

    (1) ``wait_for_replica(model)`` returns None at once only when *every* replica of the model
    is STOPPED or FAILED; otherwise it waits for the others.
    """

    STOPPED = "stopped"
    LOADING = "loading"
    READY = "ready"
    DEGRADED = "degraded"  # serving, but without speculation after a fallback
    RESTARTING = "restarting"  # waiting out the backoff after a crash
    FAILED = "failed"  # gave up: load timeout, identity mismatch, crash loop, cannot exec


SERVING = frozenset({ProcessState.READY, ProcessState.DEGRADED})  # may receive requests
STARTING = frozenset({ProcessState.LOADING, ProcessState.RESTARTING})  # will serve without anyone acting
TERMINAL = frozenset({ProcessState.STOPPED, ProcessState.FAILED})  # no process, no lifecycle task
RUNNING = frozenset({ProcessState.LOADING, ProcessState.READY, ProcessState.DEGRADED})  # a child exists


@dataclass(frozen=True)
class SupervisorPolicy:
    """Timing rules of the supervisor (seconds unless noted). Tests shrink them."""

    poll_interval: float = 0.25  # /health poll while loading
    watch_interval: float = 1.0  # /health poll while serving
    health_timeout: float = 2.0  # one /health request
    stall_timeout: float = 30.0  # in flight, no /health answer and no log output for this long -> restart
    backoff_base: float = 1.0  # first restart delay; doubles per recent crash
    backoff_max: float = 60.0
    crash_loop_count: int = 5  # this many crashes ...
    crash_loop_window: float = 60.0  # ... within this many seconds -> FAILED
    load_cap_factor: float = 3.0  # log output extends the load deadline up to this multiple
    stop_grace: float = 10.0  # SIGTERM -> SIGKILL for internal kills (stall, fallback, failure)
    exit_drain: float = 1.0  # after an exit, wait this long for the last log lines
    tail_lines: int = 500  # in-memory log tail (lines)
    draft_check_after: int = 3  # generations before "speculation inactive" is decided
    acceptance_window: int = 2000  # rolling acceptance over the last this many drafted tokens
    acceptance_min_drafted: int = 500  # judge acceptance only over at least this many drafted tokens
    spec_batch_failures: int = 3  # consecutive speculative-batch failures -> relaunch without spec
