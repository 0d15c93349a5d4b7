"""Model lifecycle on one machine: load on first request, idle unload (TTL), memory-aware eviction.

``ModelScheduler`` is the one writer of the models' state. Everything else sends it commands:

=====================================  ==================================================
``acquire(name, prefer)``              a ``Lease`` on a serving replica (the proxy), held
                                       while the model loads or waits for memory
``load(name)`` / ``unload(name)``      load now (evicting idle models) / drain and stop
``restart(name, specs)``               replicas one at a time (``rollout.py``)
``apply(config, specs)``               a reload: swap the running config, then change
                                       only what changed (``rollout.py``)
``keep_alive(name, seconds)``          a client's idle time for the model (Ollama)
``tick()``                             TTL and re-planning (its own loop calls it too)
``start()`` / ``close()``              on_start loads / stop everything
=====================================  ==================================================

One synchronous method, :meth:`ModelScheduler._schedule`, makes every decision (grant, load,
evict, close) after every change (a request arrives or ends, a replica changes state, a task ends,
a tick), so no two decisions race; loads, unloads and restarts run as tasks and call it again when
they end. Every side effect (processes, hooks, the clock) goes through its ``Effects``
(``orchestrator.supervise.effects``), so its decisions are tested without processes. The rules it
applies are listed in ``orchestrator.supervise.model_rules``.

Its parts are composed in ``__init__``, in one place: the ``SchedulerState`` they share, the
``ModelTransitions`` (load, unload, drain, notify) and the ``Rollout`` (restart, reload); each calls
``state.schedule`` (this object's ``_schedule``) after a change.

Hooks: ``before_ready`` (restore prompt caches) and ``before_stop`` (save them); ``listeners`` get
each ``ModelEvent``; ``state.changed`` is pulsed on every state change, ``state.version`` counts them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from orchestrator.supervise.budget import MemoryBudget, follow_budget
from orchestrator.supervise.managed import Lease, ManagedModel, Prefer, Waiter
from orchestrator.supervise.model_rules import (
    RETRY_AFTER,
    expired,
    follow_replicas,
    holders,
    memory_table,
    refuse_to_hold,
    removed_error,
    startup_misfit,
    unavailable_error,
    waiting_for,
)
from orchestrator.supervise.model_state import ModelEvent, ModelState, SchedulerPolicy
from orchestrator.supervise.refusals import ModelRefused, Refusal
from orchestrator.supervise.replicas import ReplicaOps
from orchestrator.supervise.rollout import Rollout
from orchestrator.supervise.transitions import ModelTransitions, SchedulerState

if TYPE_CHECKING:
    from orchestrator.config.schema import Config
    from orchestrator.launch.spec import InstanceSpec
    from orchestrator.supervise.effects import Effects
    from orchestrator.supervise.instance import Instance
    from orchestrator.supervise.rollout import ReloadReport
    from orchestrator.supervise.supervisor import Supervisor

log = logging.getLogger("orchestrator.scheduler")


class ModelScheduler:
    """Loads, unloads and evicts the models of one ``Supervisor`` under a ``MemoryBudget``.

    Args:
        supervisor: the replicas (``Instance``) of every model, started or not (``for_model``), and
            the running config (``running``: ``server.ttl``, ``queue_limit``, timeouts, each model's
            ``load``, ``ttl``, ``pinned``).
        budget: device capacities; a reload that changes ``server.memory_reserve`` or
            ``memory_budget`` gets a budget with the new values (``follow_budget``).
        policy: timing rules; tests shrink them.
        effects: what its decisions do (``Effects``); by default ``ReplicaOps`` over ``supervisor``.
    """

    def __init__(
        self,
        supervisor: Supervisor,
        budget: MemoryBudget,
        policy: SchedulerPolicy | None = None,
        *,
        effects: Effects | None = None,
    ) -> None:
        self.supervisor = supervisor
        running = supervisor.running
        self._budget = running.derive(partial(follow_budget, budget, running.current.server))
        policy = policy or SchedulerPolicy()
        effects = effects if effects is not None else ReplicaOps(supervisor, policy)
        # the parts, composed here: the shared state, the moves that take time, restart and reload;
        # every decision is this object's (``_schedule``), which the parts call after each change
        self.state = SchedulerState(running, {}, effects, policy, self._schedule)
        self.moves = ModelTransitions(self.state)
        self.rollout = Rollout(self.state, self.moves)
        for model in self.config.models:
            self.models[model.name] = self.moves.managed(model, supervisor.for_model(model.name))
        self.before_ready = effects.before_ready  # hooks: (model, "load") after its replicas serve
        self.before_stop = effects.before_stop  # hooks: (model, reason) before any stop we control
        self.decisions = 0  # _schedule runs (a tick counts): tests wait on it instead of sleeping
        self._runner: asyncio.Task[None] | None = None

    # ----------------------------------------------------------------- the shared state, read

    @property
    def budget(self) -> MemoryBudget:
        """The memory budget of the current snapshot."""
        return self._budget()

    @property
    def config(self) -> Config:
        """The running config's current snapshot."""
        return self.state.config

    @property
    def models(self) -> dict[str, ManagedModel]:
        return self.state.models

    @property
    def listeners(self) -> list[Callable[[ModelEvent], None]]:
        """Told each ``ModelEvent``."""
        return self.state.listeners

    @property
    def swaps(self) -> int:
        """Models evicted for memory so far."""
        return self.state.swaps

    @property
    def config_error(self) -> str | None:
        """The last reload's problem, shown in ``/status`` until a reload is applied."""
        return self.state.config_error

    def refused(self, problem: str) -> None:
        """A reload was refused (an invalid file, a change that needs a restart): ``/status`` shows
        ``problem`` until a reload is applied."""
        self.state.config_error = problem

    def take_auth(self, config: Config) -> bool:
        """``Rollout.take_auth``: a reload's keys current at once."""
        return self.rollout.take_auth(config)

    # ----------------------------------------------------------------- running

    async def start(self, *, load_on_start: bool = True) -> list[str]:
        """Start the background loop (TTL, replica changes) and load the ``on_start`` models that fit.

        on_start models load in models.yaml order, never evicting each other; one that does not fit
        beside those before it stays unloaded and loads on its first request.

        Returns:
            one note per on_start model left unloaded, saying why (with the numbers).
        """
        self._ensure_running()
        notes: list[str] = []
        if not load_on_start:
            return notes
        for m in self.models.values():
            if m.config.load == "on_start" and m.state is ModelState.UNLOADED:
                why = startup_misfit(m, self.models.values(), self.budget)
                if why is None:
                    self.moves.start_load(m, startup=True)
                else:
                    m.reason = f"not loaded at start: {why}; it loads on its first request"
                    notes.append(f"{m.name}: {m.reason}")
        self.moves.pulse()
        return notes

    def _ensure_running(self) -> None:
        """Start the background loop once (``start`` does; a request or a load does too, so an app
        built around a supervisor that someone else started still follows it)."""
        if self._runner is None and not self.state.closed:
            self._runner = asyncio.get_running_loop().create_task(self._run(), name="lifecycle")

    async def close(self, grace: float | None = None) -> None:
        """Stop everything the lifecycle runs: the loop, loads and unloads, and every replica
        (``before_stop`` hooks first, reason ``shutdown``). Held requests get 503."""
        self.state.closed = True
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        for m in self.models.values():
            m.fail_waiters(ModelRefused(Refusal.SHUTTING_DOWN, "the server is shutting down", retry_after=5.0))
        await asyncio.gather(*(self.state.effects.stop(m, "shutdown", grace) for m in self.models.values()))
        for task in list(self.state.tasks):
            task.cancel()
        if self.state.tasks:
            await asyncio.wait(self.state.tasks, timeout=5)

    async def _run(self) -> None:
        while True:
            await self.state.effects.changed(self.state.policy.tick)
            self.tick()

    def tick(self) -> None:
        """Unload the models idle past their TTL, and decide again (the loop calls it every
        ``policy.tick`` s and on every replica change)."""
        for m in expired(self.models.values(), self.config.server, self.state.effects.now()):
            self.moves.start_unload(m, "ttl")
        self._schedule()

    # ----------------------------------------------------------------- the proxy's side

    async def acquire(self, name: str, prefer: Prefer | None = None) -> Lease:
        """A lease on a serving replica of model ``name`` (the one ``prefer`` names, if any), holding
        the caller while it loads or waits for memory (at most ``server.timeouts.queue`` s).

        Raises:
            ModelRefused: ``queue_full`` when the model already holds ``queue_limit`` requests;
                ``model_loading`` (``when_loading: reject``, or the hold timed out, saying what it
                waited for); ``model_load_failed`` with the log's reason; ``model_too_large`` with
                the numbers when it can never fit (``serve.routing.refused_to_http`` maps each).
        """
        m = self._model(name)
        self._ensure_running()
        self._reconcile(m)
        if m.state is ModelState.READY and not m.closing and not m.waiters:
            inst = m.pick(prefer)
            if inst is not None:
                return self._grant(m, inst, 0.0)
        server = self.config.server
        refusal = refuse_to_hold(m, server)
        if refusal is not None:
            idle = m.state in (ModelState.UNLOADED, ModelState.FAILED) and m.wanted_since is None
            if server.when_loading == "reject" and idle:
                m.wanted_since = self.state.effects.now()  # reject starts the load all the same
                self._schedule()
            raise refusal
        return await self._hold(m, server.timeouts.queue, prefer)

    async def load(self, name: str, timeout: float | None = None) -> ManagedModel:
        """Load model ``name`` (evicting idle models if needed) and wait until it is READY; a FAILED
        model is tried again (a person asks).

        Raises:
            ModelRefused: with the reason when it fails, cannot fit, or is not ready within
                ``timeout`` s (default ``server.timeouts.queue``).
        """
        m = self._model(name)
        m.retry = True
        (await self._hold(m, timeout if timeout is not None else self.config.server.timeouts.queue)).release()
        return m

    async def unload(self, name: str, reason: str = "request") -> ManagedModel:
        """Unload model ``name``: cancel a load in progress, or drain its requests (at most
        ``server.timeouts.drain`` s; new ones are held) and stop its replicas. No-op when unloaded."""
        m = self._model(name)
        await self.moves.stop_model(m, reason)
        return m

    async def restart(self, name: str, specs: list[InstanceSpec] | None = None) -> None:
        """Restart model ``name``'s replicas one at a time (drain, stop, start, wait until it serves),
        with ``specs`` (by replica name) where given; a model that is not loaded only takes them."""
        await self.rollout.restart_model(self._model(name), specs)

    async def apply(self, config: Config, specs: list[InstanceSpec]) -> ReloadReport:
        """A reload: swap ``config`` in as the running config, then make the models match it and
        its launch plan ``specs`` (``orchestrator.supervise.rollout``).

        Raises:
            RestartRequired: the change needs a full restart; nothing was changed.
        """
        return await self.rollout.apply(config, specs)

    def keep_alive(self, name: str, seconds: float) -> None:
        """A client's idle time for model ``name``, replacing its ``ttl`` until the next one
        (``ManagedModel.set_keep_alive``)."""
        m = self.models.get(name)
        if m is not None:
            m.set_keep_alive(seconds)
            self._schedule()

    def _model(self, name: str) -> ManagedModel:
        """The model a command names; 404 for one a reload removed (or never had)."""
        m = self.models.get(name)
        if m is None or m.removed:
            raise removed_error(name)
        return m

    async def _hold(self, m: ManagedModel, timeout: float, prefer: Prefer | None = None) -> Lease:
        """Hold a request for ``m`` until it is granted (the model loads, a swap happens), at most
        ``timeout`` s; then 503 ``model_loading`` saying what it waited for."""
        self._ensure_running()
        waiter = Waiter(self.state.effects.now(), prefer)
        m.waiters.append(waiter)
        self._schedule()
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.future), timeout=timeout)
        except TimeoutError:
            raise ModelRefused(
                Refusal.LOADING,
                f"model {m.name!r} is not ready yet after waiting {timeout:g} s ({waiting_for(m)}); retry later",
                retry_after=RETRY_AFTER,
            ) from None
        except BaseException:
            future = waiter.future
            if future.done() and not future.cancelled() and future.exception() is None:
                future.result().release()  # granted just as the caller gave up (client gone)
            raise
        finally:
            with contextlib.suppress(ValueError):
                m.waiters.remove(waiter)
            if not waiter.future.done():
                waiter.future.cancel()
            self._schedule()

    def _grant(self, m: ManagedModel, inst: Instance, waited: float) -> Lease:
        if waited > 0:
            self.moves.emit(ModelEvent("waited", m.name, seconds=waited))
        return m.grant(inst, waited, self._release)

    def _release(self, lease: Lease) -> None:
        m = self.models.get(lease.model)
        if m is not None:
            m.release(lease)
            self._schedule()

    # ----------------------------------------------------------------- reading

    def snapshot(self) -> list[dict[str, Any]]:
        """One row per model (``ManagedModel.snapshot``)."""
        now = self.state.effects.now()
        return [m.snapshot(self.config.server, now) for m in self.models.values()]

    def memory(self) -> dict[str, dict[str, Any]]:
        """Per device: capacity, our models' use and who holds it (``model_rules.memory_table``)."""
        return memory_table(self.models.values(), self.budget)

    # ----------------------------------------------------------------- decisions (the one writer)

    def _schedule(self) -> None:
        """Decide everything that can be decided now; never awaits."""
        if self.state.closed:
            return
        self.decisions += 1
        for m in self.models.values():
            self._reconcile(m)
        closing: set[str] = set()
        reserved: set[str] = set()
        demands = [(since, m) for m in self.models.values() if (since := m.demand_since()) is not None]
        for _, m in sorted(demands, key=lambda d: d[0]):
            if m.state in (ModelState.LOADING, ModelState.READY, ModelState.UNLOADING):
                continue
            if m.state is ModelState.FAILED and not m.retry:
                m.fail_waiters(unavailable_error(m))
                continue
            devices = set(m.need) or {"cpu"}
            if devices & reserved:
                m.reason = "waiting for an earlier request's model to load"
                continue
            plan = self.budget.plan(m.name, m.need, holders(self.models.values(), exclude=m))
            if plan.impossible is not None:
                m.reason = plan.impossible
                m.fail_waiters(ModelRefused(Refusal.TOO_LARGE, plan.impossible))
                continue
            for victim in plan.evict:
                self.moves.start_unload(self.models[victim], "memory", for_model=m.name)
            closing.update(plan.drain)
            if plan.fits and not plan.evict:
                self.moves.start_load(m)
                continue
            reserved |= devices
            waits = [*plan.stopping, *plan.evict, *plan.drain]
            m.reason = f"waiting for {', '.join(waits)} to unload" if waits else "waiting for memory"
        for m in self.models.values():
            m.closing = m.name in closing
            self._grant_waiters(m)

    def _grant_waiters(self, m: ManagedModel) -> None:
        if m.state is not ModelState.READY:
            return
        now = self.state.effects.now()
        for waiter in m.grantable():
            inst = m.pick(waiter.prefer)
            if inst is None:
                return
            m.waiters.remove(waiter)
            waiter.future.set_result(self._grant(m, inst, now - waiter.since))

    def _reconcile(self, m: ManagedModel) -> None:
        """Follow replicas started or lost outside a load or unload (``model_rules.follow_replicas``)."""
        change = follow_replicas(m, idle=m.task is None or m.task.done())
        if change is None:
            return
        state, reason = change
        # replicas someone else started are followed (adopted), never evicted or unloaded by TTL
        m.adopted = state in (ModelState.LOADING, ModelState.READY) and (m.adopted or state is ModelState.LOADING)
        if state is ModelState.READY:
            m.ready_since = self.state.effects.now()
        elif state is ModelState.FAILED:
            m.failed_at = self.state.effects.now()
        self.moves.set(m, state, reason)
