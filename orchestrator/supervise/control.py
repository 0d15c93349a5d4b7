"""Steering the models of a running ``ModelScheduler``: load, unload, restart, and applying a
reloaded models.yaml (hot reload).

``ModelControl.apply(config, specs)`` compares the new launch plan with the running one:

- a model whose launch (argv, environment, GPUs) changed is drained and restarted alone, one
  replica at a time, so its other replicas keep serving and keep their pids meanwhile; a model
  that is not loaded just takes the new plan;
- aliases, TTL, pinning, load mode, queue limit and repair policy change in place;
- a removed model is drained and stopped; an added model follows its ``load`` mode;
- changing the endpoint (``server.host``, ``server.port``, ``server.cors_origins``) or ``peers``
  needs a full restart: the whole reload is refused with a message, and the running config stays.

Reloads run one at a time. Every stop goes through ``before_stop`` (reason ``reload``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestrator.errors import UserError
from orchestrator.supervise.managed import ManagedModel, model_need
from orchestrator.supervise.model_rules import removed_error
from orchestrator.supervise.model_state import ModelState
from orchestrator.supervise.states import TERMINAL

if TYPE_CHECKING:
    from orchestrator.config.schema import Config
    from orchestrator.launch.spec import InstanceSpec
    from orchestrator.supervise.instance import Instance
    from orchestrator.supervise.scheduler import ModelScheduler

RESTART_KEYS = ("host", "port", "cors_origins")  # server keys the running endpoint cannot change


class RestartRequired(UserError):
    """A reload changed what only a full restart can change (the endpoint's address or CORS)."""


@dataclass
class ReloadReport:
    """What a reload did, by model name."""

    restarted: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """``"restarted a; added b"`` (or ``"no change"``)."""
        parts = [f"{k} {', '.join(v)}" for k, v in vars(self).items() if v]
        return "; ".join(parts) or "no change"


def _launch(spec: InstanceSpec) -> tuple[object, ...]:
    """What makes a replica's process different: a change means a restart."""
    return (spec.argv, tuple(sorted(spec.env.items())), spec.gpus, spec.port)


def _has_leases(m: ManagedModel, replica: str) -> Callable[[], bool]:
    return lambda: m.leases.get(replica, 0) > 0


class ModelControl:
    """Load, unload, restart and reload on top of ``scheduler`` (composed, not inherited)."""

    def __init__(self, scheduler: ModelScheduler) -> None:
        self.scheduler = scheduler
        self._reloading = asyncio.Lock()

    async def load(self, name: str, timeout: float | None = None) -> ManagedModel:
        """Load model ``name`` (evicting idle models if needed) and wait until it is READY.

        Raises:
            ApiError: 503 with the reason when it fails, cannot fit, or is not ready within
                ``timeout`` s (default ``server.timeouts.queue``).
        """
        s = self.scheduler
        m = s.models[name]
        m.retry = True  # a person asks: a FAILED model is tried again
        (await s.hold(m, timeout if timeout is not None else s.config.server.timeouts.queue)).release()
        return m

    async def unload(self, name: str, reason: str = "request") -> ManagedModel:
        """Unload model ``name``: cancel a load in progress, or drain its requests (at most
        ``server.timeouts.drain`` s; new ones are held) and stop its replicas. No-op when unloaded."""
        s = self.scheduler
        m = s.models[name]
        if m.state is ModelState.LOADING and m.task is not None and not m.task.done():
            m.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await m.task
        elif m.task is not None and not m.task.done():
            await asyncio.shield(m.task)  # an unload, restart or reload in progress
        if m.state is ModelState.READY or any(i.state not in TERMINAL for i in m.instances):
            await s._unload(m, reason)
        return m

    async def restart(self, name: str, specs: list[InstanceSpec] | None = None) -> None:
        """Restart model ``name``'s replicas one at a time (drain, stop, start, wait until it serves),
        with ``specs`` (by replica name) where given; a model that is not loaded only takes them."""
        s = self.scheduler
        m = s.models[name]
        if m.task is not None and not m.task.done():
            await asyncio.shield(m.task)
        new = {sp.name: sp for sp in specs} if specs is not None else {i.name: i.spec for i in m.instances}
        if m.state is ModelState.READY:
            s._spawn(m, self._roll(m, new, force=specs is None), "restart")
            assert m.task is not None
            await asyncio.shield(m.task)
        else:
            self._retarget(m, new)
        s._schedule()

    def _retarget(self, m: ManagedModel, new: dict[str, InstanceSpec]) -> None:
        """Swap a stopped model's replicas for ``new`` specs (nothing runs, nothing restarts); a
        FAILED model gets a new chance with them."""
        ops = self.scheduler.ops
        m.retry = True
        for inst in list(m.instances):
            spec = new.get(inst.name)
            if spec is None:
                m.instances.remove(inst)
                ops.supervisor.instances.remove(inst)
            elif spec != inst.spec:
                m.instances[m.instances.index(inst)] = ops.replace(inst, spec)
        for name, spec in new.items():
            if all(i.name != name for i in m.instances):
                m.instances.append(ops.add(spec))
        m.need = model_need(m.instances)

    async def _roll(self, m: ManagedModel, new: dict[str, InstanceSpec], *, force: bool) -> None:
        s = self.scheduler
        ops = s.ops
        saved = False
        for inst in list(m.instances):
            spec = new.get(inst.name)
            if spec is not None and not force and _launch(spec) == _launch(inst.spec):
                continue
            m.draining.add(inst.name)
            s._pulse()
            await ops.drain(_has_leases(m, inst.name), s.config.server.timeouts.drain, s.changed)
            if not saved:
                saved = True
                await ops.run_before_stop(m, "reload")
            await inst.stop(ops.policy.stop_grace)
            m.draining.discard(inst.name)
            if spec is None:
                m.instances.remove(inst)
                ops.supervisor.instances.remove(inst)
                continue
            fresh = ops.replace(inst, spec)
            m.instances[m.instances.index(inst)] = fresh
            fresh.start()
            await ops.wait_serving([fresh])
        for name, spec in new.items():
            if all(i.name != name for i in m.instances):
                fresh = ops.add(spec)
                m.instances.append(fresh)
                fresh.start()
                await ops.wait_serving([fresh])
        m.need = model_need(m.instances)
        m.ready_since = m.last_used = time.monotonic()

    async def apply(self, config: Config, specs: list[InstanceSpec]) -> ReloadReport:
        """Make the running models match ``config`` and its launch plan ``specs`` (see the module).

        ``config`` becomes the running snapshot in one step, before any model stops or restarts:
        from then on every reader (names, keys, timeouts, listings) sees it, and a removed model
        answers 404 at once while it drains.

        Raises:
            RestartRequired: the change needs a full restart (``server.host``, ``port``,
                ``cors_origins``, ``peers``); nothing was changed.
        """
        async with self._reloading:
            s = self.scheduler
            _refuse_restart_keys(s.config, config)
            by_model: dict[str, list[InstanceSpec]] = {}
            for spec in specs:
                by_model.setdefault(spec.model, []).append(spec)
            names = {model.name for model in config.models}
            gone = [m for name, m in s.models.items() if name not in names]
            s.running.swap(config)
            report = ReloadReport(removed=[m.name for m in gone])
            for m in gone:
                m.removed = True
                m.fail_waiters(removed_error(m.name))
            restart = self._take(config, by_model, report)
            s.config_error = None
            s._schedule()
            for m in gone:
                await self._remove(m)
            for name in restart:
                await self.restart(name, by_model.get(name, []))
            return report

    def _take(self, config: Config, by_model: dict[str, list[InstanceSpec]], report: ReloadReport) -> list[str]:
        """Add the new models and update the others' settings in place; returns the models whose
        launch changed (to restart)."""
        s = self.scheduler
        restart = []
        for model in config.models:
            name = model.name
            m = s.models.get(name)
            if m is None:
                self._add(name, config, by_model.get(name, []))
                report.added.append(name)
                continue
            launch_changed = [_launch(sp) for sp in by_model.get(name, [])] != [_launch(i.spec) for i in m.instances]
            if model != m.config:
                m.config = model
                if not launch_changed:
                    report.updated.append(name)
            if launch_changed:
                restart.append(name)
                report.restarted.append(name)
        return restart

    def _add(self, name: str, config: Config, specs: list[InstanceSpec]) -> None:
        s = self.scheduler
        model = next(m for m in config.models if m.name == name)
        instances: list[Instance] = [s.ops.add(spec) for spec in specs]
        m = ManagedModel(model, instances, model_need(instances))
        s.models[name] = m
        if model.load == "on_start":
            m.wanted_since = time.monotonic()

    async def _remove(self, m: ManagedModel) -> None:
        """Drain and stop a model the running config no longer has, then forget it."""
        s = self.scheduler
        await self.unload(m.name, "reload")
        for inst in m.instances:
            s.ops.supervisor.instances.remove(inst)
        del s.models[m.name]


def _refuse_restart_keys(old: Config, new: Config) -> None:
    """Raise ``RestartRequired`` when ``new`` changes what the running endpoint cannot."""
    changed = [f"server.{k}" for k in RESTART_KEYS if getattr(old.server, k) != getattr(new.server, k)]
    changed += ["peers"] if old.peers != new.peers else []
    if changed:
        raise RestartRequired(
            f"{', '.join(changed)} changed: the running endpoint cannot change that; nothing was reloaded",
            hint="restart with `orchestrator down` and `orchestrator up`, or undo that edit",
        )
