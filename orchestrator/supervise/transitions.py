"""The scheduler's shared state and its transitions that take time.

``SchedulerState`` is what the parts of ``ModelScheduler`` share: the running config, the models,
the ``Effects``, the notification channel (``changed``, ``version``, ``listeners``) and the
tasks. ``ModelTransitions`` are the moves that take time: loading a model (its replicas start and
serve), unloading it (drain, hooks, stop), a drain with its deadline, and telling the world. Both
are parts the scheduler composes (``scheduler.py`` builds them in one place); every decision stays
``ModelScheduler``'s, reached through ``state.schedule``. Every side effect goes through ``effects``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.supervise.managed import ManagedModel, model_need
from orchestrator.supervise.model_rules import load_failed_error
from orchestrator.supervise.model_state import ModelEvent, ModelState
from orchestrator.supervise.states import TERMINAL

if TYPE_CHECKING:
    from orchestrator.config.running import RunningConfig
    from orchestrator.config.schema import Config, ModelConfig
    from orchestrator.supervise.effects import Effects
    from orchestrator.supervise.instance import Instance
    from orchestrator.supervise.model_state import SchedulerPolicy

log = logging.getLogger("orchestrator.scheduler")


@dataclass(eq=False)
class SchedulerState:
    """What the scheduler's parts share (``ModelScheduler`` makes it, the parts read and write it).

    ``schedule`` is ``ModelScheduler._schedule``: the one place that decides, called after every
    change a part makes.
    """

    running: RunningConfig
    models: dict[str, ManagedModel]
    effects: Effects
    policy: SchedulerPolicy
    schedule: Callable[[], None]
    listeners: list[Callable[[ModelEvent], None]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    version: int = 0  # state changes so far (``changed`` is pulsed on each)
    swaps: int = 0  # models evicted for memory
    config_error: str | None = None  # the last reload's problem, shown in /status
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)  # loads, unloads, restarts
    closed: bool = False

    @property
    def config(self) -> Config:
        """The running config's current snapshot."""
        return self.running.current


class ModelTransitions:
    """Loads, unloads and notifications over a ``SchedulerState`` (see the module)."""

    def __init__(self, state: SchedulerState) -> None:
        self.s = state

    def managed(self, model: ModelConfig, instances: list[Instance]) -> ManagedModel:
        return ManagedModel(model, instances, model_need(instances), clock=self.s.effects.now)

    def spawn(self, m: ManagedModel, coro: Coroutine[Any, Any, None], what: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=f"{what} {m.name}")
        m.task = task
        self.s.tasks.add(task)
        task.add_done_callback(self.s.tasks.discard)

    def start_load(self, m: ManagedModel, startup: bool = False) -> None:
        m.wanted_since = None
        m.retry = False
        m.startup = startup
        # transition: UNLOADED/FAILED -> LOADING (the task reports READY or FAILED)
        m.load_started = self.s.effects.now()
        self.set(m, ModelState.LOADING, "loading")
        self.emit(ModelEvent("load_started", m.name))
        self.spawn(m, self._load(m), "load")

    async def _load(self, m: ManagedModel) -> None:
        started = self.s.effects.now()
        try:
            problem = await self.s.effects.start(m)
        except asyncio.CancelledError:
            await self.s.effects.stop_replicas(m.instances, 0.0)
            m.load_started = None
            self.set(m, ModelState.UNLOADED, "load cancelled")
            raise
        m.load_started = None
        if problem is not None and self.s.closed:
            # shutdown stopped its replicas mid-load (Ctrl-C during `up`): the model did not fail
            self.set(m, ModelState.UNLOADED, "load cancelled (shutting down)")
            return
        if problem is not None:
            await self.s.effects.stop_replicas(m.instances, 0.0)
            m.failed_at = self.s.effects.now()
            # transition: LOADING -> FAILED (a replica exited, timed out or was refused)
            self.set(m, ModelState.FAILED, problem)
            self.emit(ModelEvent("load_failed", m.name, reason=problem))
            log.warning("model %s failed to load: %s", m.name, problem)
            m.fail_waiters(load_failed_error(m))
            self.s.schedule()
            return
        m.loads += 1
        m.last_load_seconds = self.s.effects.now() - started
        m.loaded_at = time.time()  # for people, as Unix time
        m.ready_since = m.last_used = self.s.effects.now()
        # transition: LOADING -> READY (every replica serves)
        self.set(m, ModelState.READY, None)
        self.emit(ModelEvent("loaded", m.name, seconds=m.last_load_seconds))
        self.s.schedule()

    def start_unload(self, m: ManagedModel, reason: str, for_model: str | None = None) -> None:
        if m.state is not ModelState.READY:
            return
        if reason == "memory":
            self.s.swaps += 1
            m.evictions += 1
        # transition: READY -> UNLOADING now, with the decision: a request arriving before the task
        # runs is held, not granted on a model that is going away
        self.set(m, ModelState.UNLOADING, f"unloading ({reason})")
        self.spawn(m, self._unload(m, reason, for_model), "unload")

    async def _unload(self, m: ManagedModel, reason: str, for_model: str | None = None) -> None:
        # transition: READY -> UNLOADING (drain first: new requests are held meanwhile)
        self.set(m, ModelState.UNLOADING, f"unloading ({reason})")
        await self.drain(lambda: m.in_flight > 0)
        await self.s.effects.stop(m, reason)
        m.adopted = False
        # transition: UNLOADING -> UNLOADED
        self.set(m, ModelState.UNLOADED, f"unloaded ({reason})")
        self.emit(ModelEvent("unloaded", m.name, reason=reason, for_model=for_model))
        self.s.schedule()

    async def stop_model(self, m: ManagedModel, reason: str) -> None:
        if m.state is ModelState.LOADING and m.task is not None and not m.task.done():
            m.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await m.task
        elif m.task is not None and not m.task.done():
            await asyncio.shield(m.task)  # an unload, restart or reload in progress
        if m.state is ModelState.READY or any(i.state not in TERMINAL for i in m.instances):
            await self._unload(m, reason)

    async def drain(self, busy: Callable[[], bool]) -> None:
        """Wait until ``busy()`` is False, at most ``server.timeouts.drain`` s."""
        deadline = self.s.effects.now() + self.s.config.server.timeouts.drain
        while busy() and (left := deadline - self.s.effects.now()) > 0:
            await self.s.effects.changed(min(self.s.policy.tick, left))

    # ----------------------------------------------------------------- notification

    def set(self, m: ManagedModel, state: ModelState, reason: str | None) -> None:
        m.state = state
        m.reason = reason
        self.pulse()

    def pulse(self) -> None:
        self.s.version += 1
        self.s.changed.set()
        self.s.changed.clear()

    def emit(self, event: ModelEvent) -> None:
        for listener in self.s.listeners:
            try:
                listener(event)
            except Exception:
                log.exception("lifecycle listener failed on %s", event)
