"""What the model scheduler does to the world, behind one interface: its effects.

``ModelScheduler`` decides (grant, load, evict, drain, unload after a TTL, restart, apply a
reload) and writes the models' state; every side effect of a decision goes through an ``Effects``
value: starting and stopping replicas (llama-server processes), waiting until they serve,
running the prompt-cache hooks, making replicas for new launch specs, and the clock. The real one
is ``orchestrator.supervise.replicas.ReplicaOps`` over a ``Supervisor``; the scheduler's decision
tests give it a fake that runs no process and whose clock they move (the same shape as
llama-swap's scheduler taking its effects and Ollama's scheduler taking its server factory).

The scheduler reads a replica's ``name``, ``state``, ``responsive``, ``spec`` (``gpus``,
``memory``), ``message`` and its one in-flight counter ``in_flight`` (which its leases keep); an
``Instance`` is the real one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from orchestrator.launch.spec import InstanceSpec
    from orchestrator.supervise.instance import Instance
    from orchestrator.supervise.managed import ManagedModel

#: ``hook(model, reason)``: reason is ``load`` (before_ready) or why it stops (before_stop).
Hook = Callable[["ManagedModel", str], Awaitable[None]]


class Effects(Protocol):
    """The side effects of the scheduler's decisions (see the module)."""

    before_ready: list[Hook]  # run after a model's replicas serve, before it is READY
    before_stop: list[Hook]  # run before any stop the scheduler controls

    def now(self) -> float:
        """Monotonic seconds (TTL, idle time, queueing order, drain deadlines)."""

    async def changed(self, timeout: float) -> None:
        """Return when a replica changes state, or after ``timeout`` s."""

    async def start(self, m: ManagedModel) -> str | None:
        """Start every replica of ``m``, wait until all serve, run ``before_ready``; None when
        ready, else why it failed (an exit, a timeout, a refusal, with the log's lines)."""

    async def launch(self, instances: list[Instance]) -> str | None:
        """Start ``instances`` and wait until they serve (a rolling restart's one replica)."""

    async def stop(self, m: ManagedModel, reason: str, grace: float | None = None) -> None:
        """Run ``before_stop`` (``reason``), then stop every replica of ``m``."""

    async def run_before_stop(self, m: ManagedModel, reason: str) -> None:
        """Only the ``before_stop`` hooks (a failing hook is logged, never blocks the stop)."""

    async def stop_replicas(self, instances: list[Instance], grace: float | None = None) -> None:
        """Stop ``instances`` together (SIGTERM, SIGKILL after ``grace`` s); return once reaped."""

    def add(self, spec: InstanceSpec) -> Instance:
        """A new, stopped replica for ``spec``."""

    def replace(self, old: Instance, spec: InstanceSpec) -> Instance:
        """A new, stopped replica for ``spec`` in the stopped ``old``'s place."""

    def forget(self, inst: Instance) -> None:
        """``inst`` (stopped) is no longer anyone's replica."""
