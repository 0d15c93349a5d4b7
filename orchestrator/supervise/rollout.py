"""The scheduler's commands that change a model's replicas: a rolling restart, and applying a
reloaded models.yaml (hot reload). ``Rollout`` is a part of ``ModelScheduler`` over its
``SchedulerState``, reached through its ``restart`` and ``apply`` commands; its side effects go
through the state's ``Effects``, its moves through the scheduler's ``ModelTransitions``.

``apply(config, specs)`` swaps ``config`` in as the running config, then compares the new launch
plan with the running one:

- a model whose launch (argv, environment, GPUs) changed is drained and restarted alone, one
  replica at a time, so its other replicas keep serving and keep their pids meanwhile; a model
  that is not loaded just takes the new plan;
- aliases, TTL, pinning, load mode, queue limit and repair policy change in place;
- a removed model is drained and stopped; an added model follows its ``load`` mode;
- changing the endpoint (``server.host``, ``port``, ``cors_origins``, the HTTP header limits
  ``max_header_bytes`` and ``timeouts.client_header``) or ``peers`` needs a full restart: the
  whole reload is refused with a message, and the running config stays;
- every other key applies from the next request (the running config's readers), and a replica
  made from now on takes the new ``timeouts.load`` and ``timeouts.stall``.

Who may call (``AUTH_KEYS``: ``server.api_keys``, ``auth_health``, ``auth_metrics``) changes
first: ``take_auth`` makes a read file's keys current before its launch is planned (seconds) and
while an earlier reload still drains, so a removed key is refused from the moment the file is read.

Reloads run one at a time. Every stop goes through ``before_stop`` (reason ``reload``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestrator.errors import UserError
from orchestrator.supervise.managed import ManagedModel, model_need
from orchestrator.supervise.model_rules import removed_error
from orchestrator.supervise.model_state import ModelState
from orchestrator.supervise.transitions import ModelTransitions, SchedulerState

if TYPE_CHECKING:
    from orchestrator.config.schema import Config, ServerConfig
    from orchestrator.launch.spec import InstanceSpec
    from orchestrator.supervise.instance import Instance

# server keys the running endpoint cannot change: its socket, CORS, and what uvicorn's HTTP
# protocol was built with (the header limits)
RESTART_KEYS = ("host", "port", "cors_origins", "ollama_api", "max_header_bytes", "timeouts.client_header")
# server keys that decide who may call: current at once (``Rollout.take_auth``)
AUTH_KEYS = ("api_keys", "auth_health", "auth_metrics")


class RestartRequired(UserError):
    """A reload changed what only a full restart can change (``RESTART_KEYS``, ``peers``)."""


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
        return "; ".join(parts) or NO_CHANGE


NO_CHANGE = "no change"


def _launch(spec: InstanceSpec) -> tuple[object, ...]:
    """What makes a replica's process different: a change means a restart."""
    return (spec.argv, tuple(sorted(spec.env.items())), spec.gpus, spec.port)


def _busy(inst: Instance) -> Callable[[], bool]:
    return lambda: inst.in_flight > 0


def with_auth(config: Config, server: ServerConfig) -> Config:
    """``config`` with the ``AUTH_KEYS`` of ``server`` (a new snapshot)."""
    auth = {k: getattr(server, k) for k in AUTH_KEYS}
    return config.model_copy(update={"server": config.server.model_copy(update=auth)})


class Rollout:
    """Restart and reload over the scheduler's state and transitions (see the module)."""

    def __init__(self, state: SchedulerState, moves: ModelTransitions) -> None:
        self.s = state
        self.moves = moves
        self._reloading = asyncio.Lock()  # reloads run one at a time

    def take_auth(self, config: Config) -> bool:
        """Make ``config``'s ``AUTH_KEYS`` current now, all else as it runs (a reload's first step:
        before its launch is planned, and while an earlier reload still drains). False, changing
        nothing, when ``config`` needs a full restart (its reload will be refused)."""
        current = self.s.running.current
        try:
            _refuse_restart_keys(current, config)
        except RestartRequired:
            return False
        if any(getattr(current.server, k) != getattr(config.server, k) for k in AUTH_KEYS):
            self.s.running.swap(with_auth(current, config.server))
        return True

    async def restart_model(self, m: ManagedModel, specs: list[InstanceSpec] | None = None) -> None:
        """Restart ``m``'s replicas one at a time (drain, stop, start, wait until it serves), with
        ``specs`` (by replica name) where given; a model that is not loaded only takes them."""
        if m.task is not None and not m.task.done():
            await asyncio.shield(m.task)
        new = {sp.name: sp for sp in specs} if specs is not None else {i.name: i.spec for i in m.instances}
        if m.state is ModelState.READY:
            self.moves.spawn(m, self._roll(m, new, force=specs is None), "restart")
            assert m.task is not None
            await asyncio.shield(m.task)
        else:
            self._retarget(m, new)
        self.s.schedule()

    def _retarget(self, m: ManagedModel, new: dict[str, InstanceSpec]) -> None:
        """Swap a stopped model's replicas for ``new`` specs (nothing runs, nothing restarts); a
        FAILED model gets a new chance with them."""
        effects = self.s.effects
        m.retry = True
        for inst in list(m.instances):
            spec = new.get(inst.name)
            if spec is None:
                m.instances.remove(inst)
                effects.forget(inst)
            elif spec != inst.spec:
                m.instances[m.instances.index(inst)] = effects.replace(inst, spec)
        for name, spec in new.items():
            if all(i.name != name for i in m.instances):
                m.instances.append(effects.add(spec))
        m.need = model_need(m.instances)

    async def _roll(self, m: ManagedModel, new: dict[str, InstanceSpec], *, force: bool) -> None:
        effects = self.s.effects
        saved = False
        for inst in list(m.instances):
            spec = new.get(inst.name)
            if spec is not None and not force and _launch(spec) == _launch(inst.spec):
                continue
            m.draining.add(inst.name)
            self.moves.pulse()
            await self.moves.drain(_busy(inst))
            if not saved:
                saved = True
                await effects.run_before_stop(m, "reload")
            await effects.stop_replicas([inst])
            m.draining.discard(inst.name)
            if spec is None:
                m.instances.remove(inst)
                effects.forget(inst)
                continue
            fresh = effects.replace(inst, spec)
            m.instances[m.instances.index(inst)] = fresh
            await effects.launch([fresh])
        for name, spec in new.items():
            if all(i.name != name for i in m.instances):
                fresh = effects.add(spec)
                m.instances.append(fresh)
                await effects.launch([fresh])
        m.need = model_need(m.instances)
        m.ready_since = m.last_used = effects.now()

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
            _refuse_restart_keys(self.s.config, config)
            by_model: dict[str, list[InstanceSpec]] = {}
            for spec in specs:
                by_model.setdefault(spec.model, []).append(spec)
            names = {model.name for model in config.models}
            gone = [m for name, m in self.s.models.items() if name not in names]
            self.s.running.swap(config)
            report = ReloadReport(removed=[m.name for m in gone])
            for m in gone:
                m.removed = True
                m.fail_waiters(removed_error(m.name))
            restart = self._take(config, by_model, report)
            self.s.config_error = None
            self.s.schedule()
            for m in gone:
                await self._remove(m)
            for name in restart:
                await self.restart_model(self.s.models[name], by_model.get(name, []))
            return report

    def _take(self, config: Config, by_model: dict[str, list[InstanceSpec]], report: ReloadReport) -> list[str]:
        """Add the new models and update the others' settings in place; returns the models whose
        launch changed (to restart)."""
        restart = []
        for model in config.models:
            name = model.name
            m = self.s.models.get(name)
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
        model = next(m for m in config.models if m.name == name)
        m = self.moves.managed(model, [self.s.effects.add(spec) for spec in specs])
        self.s.models[name] = m
        if model.load == "on_start":
            m.wanted_since = self.s.effects.now()

    async def _remove(self, m: ManagedModel) -> None:
        """Drain and stop a model the running config no longer has, then forget it."""
        await self.moves.stop_model(m, "reload")
        for inst in m.instances:
            self.s.effects.forget(inst)
        del self.s.models[m.name]


def _key(config: Config, dotted: str) -> object:
    value: object = config.server
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _refuse_restart_keys(old: Config, new: Config) -> None:
    """Raise ``RestartRequired`` when ``new`` changes what the running endpoint cannot."""
    changed = [f"server.{k}" for k in RESTART_KEYS if _key(old, k) != _key(new, k)]
    changed += ["peers"] if old.peers != new.peers else []
    if changed:
        raise RestartRequired(
            f"{', '.join(changed)} changed: the running endpoint cannot change that; nothing was reloaded",
            hint="restart with `orchestrator down` and `orchestrator up`, or undo that edit",
        )
