"""States of a model under the lifecycle (load on demand, idle unload, eviction), its timing rules
and the events it reports. Pure: imports nothing of the package but ``errors``.

A *model* is all replicas of one models.yaml entry; ``orchestrator.supervise.states`` has the
states of each replica's llama-server process.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ModelState(enum.Enum):
    """Lifecycle of one model (all its replicas), owned by ``ModelScheduler``.

    What each call and event does in each state:

    ==================  =====================  ======================  =====================  ==================
    call / event        UNLOADED / FAILED      LOADING                 READY                  UNLOADING
    ==================  =====================  ======================  =====================  ==================
    request             held; load starts      held; granted at ready  granted (held while    held; load starts
                        when it fits (evicting                         another model waits    again once stopped
                        idle LRU models);                              for its memory and the
                        FAILED: 503 with the                           request came after the
                        reason at once                                 load)
    ``load()``          loads (FAILED too)     waits                   no-op                  waits, then loads
    ``unload()``        no-op                  stops the load          drains (new requests   waits
                                                                       held), stops
    replica fails       --                     stop all -> FAILED,     all replicas gone ->   --
    (exit/timeout)                             waiters get 503         FAILED
    idle > ttl          --                     --                      unload (not pinned)    --
    another model       --                     --                      evicted when idle and  --
    needs the memory                                                   not pinned (LRU)
    ==================  =====================  ======================  =====================  ==================
    """

    UNLOADED = "unloaded"
    LOADING = "loading"
    READY = "ready"
    UNLOADING = "unloading"
    FAILED = "failed"


HOLDS_MEMORY = frozenset({ModelState.LOADING, ModelState.READY, ModelState.UNLOADING})


@dataclass(frozen=True)
class SchedulerPolicy:
    """Timing rules of the lifecycle (seconds). Tests shrink them."""

    tick: float = 1.0  # TTL checks and re-planning at least this often
    stop_grace: float = 10.0  # SIGTERM -> SIGKILL when unloading


@dataclass(frozen=True)
class ModelEvent:
    """Something the lifecycle did, for metrics, logs and the console.

    ``kind``: ``load_started``, ``loaded`` (``seconds`` = load time), ``load_failed``
    (``reason``), ``unloaded`` (``reason``: ``ttl``, ``memory`` (evicted for ``for_model``: a
    swap), ``request``, ``reload``, ``shutdown``), ``waited`` (``seconds`` a request was held).
    """

    kind: str
    model: str
    seconds: float | None = None
    reason: str | None = None
    for_model: str | None = None
