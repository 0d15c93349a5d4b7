"""The real effects of the model scheduler (``orchestrator.supervise.effects.Effects``) over a
``Supervisor``: start a model's replicas and wait until they serve, stop them (with the
``before_ready`` / ``before_stop`` hooks), make replicas for new launch specs, the clock.

``ReplicaOps`` never changes a model's state; ``ModelScheduler`` awaits these calls in its load,
unload and restart tasks and makes every transition itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from orchestrator.supervise.instance import Instance
from orchestrator.supervise.lifecycle import describe_exit
from orchestrator.supervise.readiness import failure_lines
from orchestrator.supervise.states import SERVING, TERMINAL, ProcessState

if TYPE_CHECKING:
    from orchestrator.launch.spec import InstanceSpec
    from orchestrator.supervise.effects import Hook
    from orchestrator.supervise.managed import ManagedModel
    from orchestrator.supervise.model_state import SchedulerPolicy
    from orchestrator.supervise.supervisor import Supervisor

log = logging.getLogger("orchestrator.scheduler")


class ReplicaOps:
    """The scheduler's effects on real llama-server processes (``Effects``).

    Args:
        supervisor: owns the ``Instance`` objects (``changed`` is pulsed on their state changes).
        policy: ``tick`` (re-check bound, s) and ``stop_grace`` (SIGTERM -> SIGKILL, s).
    """

    def __init__(self, supervisor: Supervisor, policy: SchedulerPolicy) -> None:
        self.supervisor = supervisor
        self.policy = policy
        self.before_ready: list[Hook] = []
        self.before_stop: list[Hook] = []

    @staticmethod
    def now() -> float:
        """Monotonic seconds."""
        return time.monotonic()

    async def changed(self, timeout: float) -> None:
        """Return on the supervisor's next state change, or after ``timeout`` s."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.supervisor.changed.wait(), timeout=timeout)

    async def start(self, m: ManagedModel) -> str | None:
        """Start every replica and wait until all serve, then run ``before_ready``.

        Returns:
            None when ready, else why it failed (a replica exited, timed out or was refused
            before serving; with the log's error lines).
        """
        for inst in m.instances:
            inst.start()
        problem = await self.wait_serving(m.instances)
        if problem is None:
            for hook in self.before_ready:
                await hook(m, "load")
        return problem

    async def wait_serving(self, instances: list[Instance]) -> str | None:
        """Wait until every one of ``instances`` serves (None) or one fails before serving (the reason)."""
        while True:
            for inst in instances:
                if inst.state is ProcessState.RESTARTING or inst.state in TERMINAL:
                    return startup_failure(inst)
            if all(i.state in SERVING for i in instances):
                return None
            await self.changed(self.policy.tick)

    async def launch(self, instances: list[Instance]) -> str | None:
        """Start ``instances`` and wait until they serve (None) or one fails before serving (why)."""
        for inst in instances:
            inst.start()
        return await self.wait_serving(instances)

    async def stop(self, m: ManagedModel, reason: str, grace: float | None = None) -> None:
        """Run ``before_stop``, then stop every replica."""
        if all(i.state in TERMINAL for i in m.instances):
            return
        await self.run_before_stop(m, reason)
        await self.stop_replicas(m.instances, grace)

    async def run_before_stop(self, m: ManagedModel, reason: str) -> None:
        """The ``before_stop`` hooks (a failing hook is logged, never blocks the stop)."""
        for hook in self.before_stop:
            try:
                await hook(m, reason)
            except Exception:
                log.exception("before_stop hook failed for %s", m.name)

    async def stop_replicas(self, instances: list[Instance], grace: float | None = None) -> None:
        """Stop ``instances`` together (SIGTERM, SIGKILL after ``grace`` s, by default the policy's
        ``stop_grace``); returns once reaped."""
        grace = self.policy.stop_grace if grace is None else grace
        await asyncio.gather(*(i.stop(grace) for i in instances))

    def replace(self, old: Instance, spec: InstanceSpec) -> Instance:
        """A new ``Instance`` for ``spec`` in the supervisor's list, in ``old``'s place (``old`` stopped)."""
        new = self._make(spec)
        self.supervisor.instances[self.supervisor.instances.index(old)] = new
        return new

    def add(self, spec: InstanceSpec) -> Instance:
        """A new (stopped) ``Instance`` for ``spec``, added to the supervisor's list."""
        new = self._make(spec)
        self.supervisor.instances.append(new)
        return new

    def forget(self, inst: Instance) -> None:
        """Take the stopped ``inst`` out of the supervisor's list."""
        self.supervisor.instances.remove(inst)

    def _make(self, spec: InstanceSpec) -> Instance:
        sup = self.supervisor
        return Instance(spec, sup.config, log_dir=sup.log_dir, policy=sup.policy_now(), on_change=sup._pulse)


def startup_failure(inst: Instance) -> str:
    """Why ``inst`` did not come up: its exit and the log's error lines, or its own message."""
    if inst.state is ProcessState.RESTARTING:
        cause = failure_lines(inst.log_tail(200), 3) or inst.log_tail(3)
        return f"{inst.name} {describe_exit(inst.exit_code)} while loading" + (
            f"; log: {' | '.join(cause)}" if cause else ""
        )
    return f"{inst.name}: {inst.message or inst.state.value}"
