"""Supervise one llama-server per ``InstanceSpec``: start, wait ready, verify, watch, restart, stop.

``Supervisor`` holds every ``Instance`` of one ``orchestrator up`` (or bench run) and answers the
proxy's questions: which replica to pick, wait for one to serve. The names callers need with it
(the states and their groups, the policy, ``Instance``, ``describe_exit``) are exported here too.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.config.running import RunningConfig
from orchestrator.supervise.instance import Instance
from orchestrator.supervise.lifecycle import describe_exit
from orchestrator.supervise.managed import least_busy
from orchestrator.supervise.states import RUNNING, SERVING, STARTING, TERMINAL, ProcessState, SupervisorPolicy
from orchestrator.supervise.status import status_row

if TYPE_CHECKING:
    from orchestrator.config.schema import Config
    from orchestrator.launch.spec import InstanceSpec


# seconds between state re-checks while waiting for a change (a missed pulse costs at most this)
RECHECK_S = 0.5


class Supervisor:
    """All instances of one ``orchestrator up``.

    Args:
        specs: the launch plan (``orchestrator.launch.plan.plan_launch``).
        config: the validated config (timeouts, per-model speculative settings), or the running
            config to follow (``running``; new instances take its current snapshot).
        log_dir: directory for ``<instance>.log`` files (appended across restarts).
        policy: timing rules; defaults suit production.

    ``changed`` is an ``asyncio.Event`` pulsed (set, then cleared) on every state change and
    notable event; ``await supervisor.changed.wait()`` wakes on the next one.
    """

    def __init__(
        self,
        specs: Iterable[InstanceSpec],
        config: Config | RunningConfig,
        *,
        log_dir: Path,
        policy: SupervisorPolicy | None = None,
    ) -> None:
        self.running = config if isinstance(config, RunningConfig) else RunningConfig(config)
        config = self.running.current
        self.log_dir = Path(log_dir)
        self.policy = policy or SupervisorPolicy(stall_timeout=config.server.timeouts.stall)
        self._stall_from_config = policy is None  # then a reload's server.timeouts.stall applies
        self.changed = asyncio.Event()
        self.instances = [
            Instance(s, config, log_dir=self.log_dir, policy=self.policy, on_change=self._pulse) for s in specs
        ]

    @property
    def config(self) -> Config:
        """The running config's current snapshot (``running``: its one owner, swapped by a reload)."""
        return self.running.current

    def policy_now(self) -> SupervisorPolicy:
        """The rules for an instance made now: ``policy``, with the running config's
        ``server.timeouts.stall`` when the policy came from the config."""
        if not self._stall_from_config:
            return self.policy
        return replace(self.policy, stall_timeout=self.config.server.timeouts.stall)

    def _pulse(self, _inst: Instance) -> None:
        self.changed.set()
        self.changed.clear()

    def for_model(self, model: str) -> list[Instance]:
        """Instances (replicas) of the model named ``model``."""
        return [i for i in self.instances if i.spec.model == model]

    def pick(self, model: str) -> Instance | None:
        """The serving, responsive replica of ``model`` with the fewest requests in flight
        (``least_busy``, the scheduler's picker too), or None."""
        return least_busy([i for i in self.for_model(model) if i.state in SERVING and i.responsive])

    async def wait_for_replica(self, model: str, timeout: float) -> Instance | None:
        """Hold until a replica of ``model`` serves (``server.when_loading: hold``), at most ``timeout`` s.

        Returns None on timeout, or at once when no replica can become ready (all FAILED or
        STOPPED, or the model is unknown).
        """
        deadline = time.monotonic() + timeout
        while True:
            inst = self.pick(model)
            if inst is not None:
                return inst
            if all(i.state in TERMINAL for i in self.for_model(model)):
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            with contextlib.suppress(asyncio.TimeoutError):
                # bounded: wait_for starts its task on a later loop turn, and a pulse (set, clear)
                # that lands before then is missed; re-checking the states covers it
                await asyncio.wait_for(self.changed.wait(), timeout=min(left, RECHECK_S))

    async def start(self) -> None:
        """Launch every instance and return at once; readiness is tracked in the background."""
        for inst in self.instances:
            inst.start()

    async def wait_all_ready(self, timeout: float) -> bool:
        """Wait until every instance serves (True), or until one cannot or ``timeout`` s pass (False)."""
        deadline = time.monotonic() + timeout
        while True:
            states = [i.state for i in self.instances]
            if all(s in SERVING for s in states):
                return True
            if any(s in TERMINAL for s in states):
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(asyncio.TimeoutError):
                # bounded: wait_for starts its task on a later loop turn, and a pulse (set, clear)
                # that lands before then is missed; re-checking the states covers it
                await asyncio.wait_for(self.changed.wait(), timeout=min(left, RECHECK_S))

    async def stop(self, grace: float) -> None:
        """Stop all children: SIGTERM each process group, SIGKILL after ``grace`` s; reap all."""
        await asyncio.gather(*(i.stop(grace) for i in self.instances))

    def kill_now(self) -> None:
        """SIGKILL every child group at once (synchronous; for exit paths that cannot await)."""
        for inst in self.instances:
            inst.kill_now()

    def snapshot(self) -> list[dict[str, Any]]:
        """One JSON-serialisable row per instance (``orchestrator.supervise.status.status_row``)."""
        return [status_row(i) for i in self.instances]


__all__ = [
    "RUNNING",
    "SERVING",
    "STARTING",
    "TERMINAL",
    "Instance",
    "ProcessState",
    "Supervisor",
    "SupervisorPolicy",
    "describe_exit",
]
