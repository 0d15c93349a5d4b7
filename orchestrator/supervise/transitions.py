"""The scheduler's transitions that take time: loading a model (its replicas start and serve),
unloading it (drain, hooks, stop), a drain with its deadline, and telling the world (``changed``,
``listeners``). ``ModelTransitions`` is the base of ``ModelScheduler``, the one writer of the
models' state: these are its own methods, split from its decisions by concern. Every side effect
goes through its ``effects``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
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


class ModelTransitions:
    """Loads, unloads and notifications of ``ModelScheduler`` (see the module)."""

    running: RunningConfig
    models: dict[str, ManagedModel]
    effects: Effects
    policy: SchedulerPolicy
    listeners: list[Callable[[ModelEvent], None]]
    changed: asyncio.Event
    version: int
    swaps: int
    config_error: str | None
    _tasks: set[asyncio.Task[Any]]
    _closed: bool

    @property
    def config(self) -> Config:
        """The running config's current snapshot."""
        return self.running.current

    def refused(self, problem: str) -> None:
        """A reload was refused (an invalid file, a change that needs a restart): ``/status`` shows
        ``problem`` until a reload is applied."""
        self.config_error = problem

    def _schedule(self) -> None:
        raise NotImplementedError  # ModelScheduler decides

    def _managed(self, model: ModelConfig, instances: list[Instance]) -> ManagedModel:
        return ManagedModel(model, instances, model_need(instances), clock=self.effects.now)

    def _spawn(self, m: ManagedModel, coro: Coroutine[Any, Any, None], what: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=f"{what} {m.name}")
        m.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _start_load(self, m: ManagedModel, startup: bool = False) -> None:
        m.wanted_since = None
        m.retry = False
        m.startup = startup
        # transition: UNLOADED/FAILED -> LOADING (the task reports READY or FAILED)
        m.load_started = self.effects.now()
        self._set(m, ModelState.LOADING, "loading")
        self._emit(ModelEvent("load_started", m.name))
        self._spawn(m, self._load(m), "load")

    async def _load(self, m: ManagedModel) -> None:
        started = self.effects.now()
        try:
            problem = await self.effects.start(m)
        except asyncio.CancelledError:
            await self.effects.stop_replicas(m.instances, 0.0)
            m.load_started = None
            self._set(m, ModelState.UNLOADED, "load cancelled")
            raise
        m.load_started = None
        if problem is not None and self._closed:
            # shutdown stopped its replicas mid-load (Ctrl-C during `up`): the model did not fail
            self._set(m, ModelState.UNLOADED, "load cancelled (shutting down)")
            return
        if problem is not None:
            await self.effects.stop_replicas(m.instances, 0.0)
            m.failed_at = self.effects.now()
            # transition: LOADING -> FAILED (a replica exited, timed out or was refused)
            self._set(m, ModelState.FAILED, problem)
            self._emit(ModelEvent("load_failed", m.name, reason=problem))
            log.warning("model %s failed to load: %s", m.name, problem)
            m.fail_waiters(load_failed_error(m))
            self._schedule()
            return
        m.loads += 1
        m.last_load_seconds = self.effects.now() - started
        m.loaded_at = time.time()  # for people, as Unix time
        m.ready_since = m.last_used = self.effects.now()
        # transition: LOADING -> READY (every replica serves)
        self._set(m, ModelState.READY, None)
        self._emit(ModelEvent("loaded", m.name, seconds=m.last_load_seconds))
        self._schedule()

    def _start_unload(self, m: ManagedModel, reason: str, for_model: str | None = None) -> None:
        if m.state is not ModelState.READY:
            return
        if reason == "memory":
            self.swaps += 1
            m.evictions += 1
        # transition: READY -> UNLOADING now, with the decision: a request arriving before the task
        # runs is held, not granted on a model that is going away
        self._set(m, ModelState.UNLOADING, f"unloading ({reason})")
        self._spawn(m, self._unload(m, reason, for_model), "unload")

    async def _unload(self, m: ManagedModel, reason: str, for_model: str | None = None) -> None:
        # transition: READY -> UNLOADING (drain first: new requests are held meanwhile)
        self._set(m, ModelState.UNLOADING, f"unloading ({reason})")
        await self._drain(lambda: m.in_flight > 0)
        await self.effects.stop(m, reason)
        m.adopted = False
        # transition: UNLOADING -> UNLOADED
        self._set(m, ModelState.UNLOADED, f"unloaded ({reason})")
        self._emit(ModelEvent("unloaded", m.name, reason=reason, for_model=for_model))
        self._schedule()

    async def _stop_model(self, m: ManagedModel, reason: str) -> None:
        if m.state is ModelState.LOADING and m.task is not None and not m.task.done():
            m.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await m.task
        elif m.task is not None and not m.task.done():
            await asyncio.shield(m.task)  # an unload, restart or reload in progress
        if m.state is ModelState.READY or any(i.state not in TERMINAL for i in m.instances):
            await self._unload(m, reason)

    async def _drain(self, busy: Callable[[], bool]) -> None:
        """Wait until ``busy()`` is False, at most ``server.timeouts.drain`` s."""
        deadline = self.effects.now() + self.config.server.timeouts.drain
        while busy() and (left := deadline - self.effects.now()) > 0:
            await self.effects.changed(min(self.policy.tick, left))

    # ----------------------------------------------------------------- notification

    def _set(self, m: ManagedModel, state: ModelState, reason: str | None) -> None:
        m.state = state
        m.reason = reason
        self._pulse()

    def _pulse(self) -> None:
        self.version += 1
        self.changed.set()
        self.changed.clear()

    def _emit(self, event: ModelEvent) -> None:
        for listener in self.listeners:
            try:
                listener(event)
            except Exception:
                log.exception("lifecycle listener failed on %s", event)
