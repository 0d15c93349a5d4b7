"""Model lifecycle on one machine: load on first request, idle unload (TTL), memory-aware eviction.

``ModelScheduler`` sits between the proxy and the ``Supervisor``: :meth:`ModelScheduler.acquire`
gives a ``Lease`` on a serving replica, holding the request while the model loads. One synchronous
method, :meth:`ModelScheduler._schedule`, makes every decision (grant, load, evict, close) after
every change (a request arrives or ends, a replica changes state, a task ends, a tick), so no two
decisions race; loads and unloads run as tasks and call it again when they end.

The rules it applies are listed in ``orchestrator.supervise.model_rules``.

Hooks: ``before_ready`` (restore prompt caches) and ``before_stop`` (save them); ``listeners`` get
each ``ModelEvent``; ``changed`` is pulsed on every state change, ``version`` counts them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ApiError
from orchestrator.supervise.budget import MemoryBudget, follow_budget
from orchestrator.supervise.managed import Lease, ManagedModel, Prefer, Waiter, model_need
from orchestrator.supervise.model_rules import (
    expired,
    follow_replicas,
    holders,
    load_failed_error,
    memory_table,
    removed_error,
    startup_misfit,
    unavailable_error,
    waiting_for,
)
from orchestrator.supervise.model_state import ModelEvent, ModelState, SchedulerPolicy
from orchestrator.supervise.replicas import ReplicaOps

if TYPE_CHECKING:
    from orchestrator.config.schema import Config
    from orchestrator.supervise.instance import Instance
    from orchestrator.supervise.supervisor import Supervisor

log = logging.getLogger("orchestrator.scheduler")

RETRY_AFTER = 5.0  # seconds a client is told to wait after a 503/429 from the lifecycle


class ModelScheduler:
    """Loads, unloads and evicts the models of one ``Supervisor`` under a ``MemoryBudget``.

    Args:
        supervisor: owns the replicas (``Instance``) of every model, started or not, and the running
            config (``server.ttl``, ``queue_limit``, timeouts, each model's ``load``, ``ttl``, ``pinned``).
        budget: device capacities; a reload that changes ``server.memory_reserve`` or
            ``memory_budget`` gets a budget with the new values (``follow_budget``).
        policy: timing rules; tests shrink them.
    """

    @property
    def config(self) -> Config:
        """The running config's current snapshot."""
        return self.running.current

    @property
    def budget(self) -> MemoryBudget:
        """The memory budget of the current snapshot."""
        return self._budget()

    def __init__(self, supervisor: Supervisor, budget: MemoryBudget, policy: SchedulerPolicy | None = None) -> None:
        self.supervisor = supervisor
        self.running = supervisor.running
        self._budget = self.running.derive(partial(follow_budget, budget, self.running.current.server))
        self.policy = policy or SchedulerPolicy()
        self.models: dict[str, ManagedModel] = {}
        for model in self.config.models:
            insts = supervisor.for_model(model.name)
            self.models[model.name] = ManagedModel(model, insts, model_need(insts))
        self.listeners: list[Callable[[ModelEvent], None]] = []
        self.ops = ReplicaOps(supervisor, self.policy)
        self.before_ready = self.ops.before_ready  # hooks: (model, "load") after its replicas serve
        self.before_stop = self.ops.before_stop  # hooks: (model, reason) before any stop we control
        self.changed = asyncio.Event()
        self.version = 0
        self.decisions = 0  # _schedule runs (a tick counts): tests wait on it instead of sleeping
        self.swaps = 0
        self.config_error: str | None = None  # the last reload's problem, shown in /status
        self._runner: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

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
                    self._start_load(m, startup=True)
                else:
                    m.reason = f"not loaded at start: {why}; it loads on its first request"
                    notes.append(f"{m.name}: {m.reason}")
        self._pulse()
        return notes

    def _ensure_running(self) -> None:
        """Start the background loop once (``start`` does; a request or a load does too, so an app
        built around a supervisor that someone else started still follows it)."""
        if self._runner is None and not self._closed:
            self._runner = asyncio.get_running_loop().create_task(self._run(), name="lifecycle")

    async def close(self, grace: float | None = None) -> None:
        """Stop everything the lifecycle runs: the loop, loads and unloads, and every replica
        (``before_stop`` hooks first, reason ``shutdown``). Held requests get 503."""
        self._closed = True
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        for m in self.models.values():
            m.fail_waiters(ApiError(503, "the server is shutting down", code="draining", retry_after=5.0))
        await asyncio.gather(*(self.ops.stop(m, "shutdown", grace) for m in self.models.values()))
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.supervisor.changed.wait(), timeout=self.policy.tick)
            self._unload_idle()
            self._schedule()

    # ----------------------------------------------------------------- the proxy's side

    async def acquire(self, name: str, prefer: Prefer | None = None) -> Lease:
        """A lease on a serving replica of model ``name`` (the one ``prefer`` names, if any), holding
        the caller while it loads or waits for memory (at most ``server.timeouts.queue`` s).

        Raises:
            ApiError: 429 when the model already holds ``queue_limit`` requests; 503 ``model_loading``
                (``when_loading: reject``, or the hold timed out, saying what it waited for);
                503 ``model_load_failed`` with the log's reason; 503 ``model_too_large`` with the
                numbers when it can never fit.
        """
        m = self.models.get(name)
        if m is None or m.removed:
            raise removed_error(name)
        self._ensure_running()
        self._reconcile(m)
        if m.state is ModelState.READY and not m.closing and not m.waiters:
            inst = m.pick(prefer)
            if inst is not None:
                return self._grant(m, inst, 0.0)
        server = self.config.server
        if server.when_loading == "reject":
            if m.state in (ModelState.UNLOADED, ModelState.FAILED) and m.wanted_since is None:
                m.wanted_since = time.monotonic()
                self._schedule()
            raise ApiError(
                503,
                f"model {name!r} is not ready yet ({waiting_for(m)}); retry later",
                code="model_loading",
                retry_after=RETRY_AFTER,
            )
        if len(m.waiters) >= m.queue_limit(server):
            raise ApiError(
                429,
                f"model {name!r} already holds {len(m.waiters)} waiting requests (queue_limit); retry later",
                code="queue_full",
                retry_after=RETRY_AFTER,
            )
        return await self.hold(m, server.timeouts.queue, prefer)

    async def hold(self, m: ManagedModel, timeout: float, prefer: Prefer | None = None) -> Lease:
        """Hold a request for ``m`` until it is granted (the model loads, a swap happens), at most
        ``timeout`` s; then 503 ``model_loading`` saying what it waited for."""
        self._ensure_running()
        waiter = Waiter(prefer)
        m.waiters.append(waiter)
        self._schedule()
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.future), timeout=timeout)
        except TimeoutError:
            raise ApiError(
                503,
                f"model {m.name!r} is not ready yet after waiting {timeout:g} s ({waiting_for(m)}); retry later",
                code="model_loading",
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
            self._emit(ModelEvent("waited", m.name, seconds=waited))
        return m.grant(inst, waited, self._release)

    def _release(self, lease: Lease) -> None:
        m = self.models.get(lease.model)
        if m is not None:
            m.release(lease)
            self._schedule()

    # ----------------------------------------------------------------- reading

    def snapshot(self) -> list[dict[str, Any]]:
        """One row per model (``ManagedModel.snapshot``)."""
        now = time.monotonic()
        return [m.snapshot(self.config.server, now) for m in self.models.values()]

    def memory(self) -> dict[str, dict[str, Any]]:
        """Per device: capacity, our models' use and who holds it (``model_rules.memory_table``)."""
        return memory_table(self.models.values(), self.budget)

    # ----------------------------------------------------------------- decisions (the one writer)

    def _schedule(self) -> None:
        """Decide everything that can be decided now; never awaits."""
        if self._closed:
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
                m.fail_waiters(ApiError(503, plan.impossible, code="model_too_large"))
                continue
            for victim in plan.evict:
                self._start_unload(self.models[victim], "memory", for_model=m.name)
            closing.update(plan.drain)
            if plan.fits and not plan.evict:
                self._start_load(m)
                continue
            reserved |= devices
            waits = [*plan.evict, *plan.drain]
            m.reason = f"waiting for {', '.join(waits)} to unload" if waits else "waiting for memory"
        for m in self.models.values():
            m.closing = m.name in closing
            self._grant_waiters(m)

    def _grant_waiters(self, m: ManagedModel) -> None:
        if m.state is not ModelState.READY:
            return
        now = time.monotonic()
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
            m.ready_since = time.monotonic()
        elif state is ModelState.FAILED:
            m.failed_at = time.monotonic()
        self._set(m, state, reason)

    def _unload_idle(self) -> None:
        for m in expired(self.models.values(), self.config.server, time.monotonic()):
            self._start_unload(m, "ttl")

    # ----------------------------------------------------------------- loads and unloads

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
        m.load_started = time.monotonic()
        self._set(m, ModelState.LOADING, "loading")
        self._emit(ModelEvent("load_started", m.name))
        self._spawn(m, self._load(m), "load")

    async def _load(self, m: ManagedModel) -> None:
        started = time.monotonic()
        try:
            problem = await self.ops.start(m)
        except asyncio.CancelledError:
            await self.ops.stop_replicas(m.instances, 0.0)
            m.load_started = None
            self._set(m, ModelState.UNLOADED, "load cancelled")
            raise
        m.load_started = None
        if problem is not None:
            await self.ops.stop_replicas(m.instances, 0.0)
            m.failed_at = time.monotonic()
            # transition: LOADING -> FAILED (a replica exited, timed out or was refused)
            self._set(m, ModelState.FAILED, problem)
            self._emit(ModelEvent("load_failed", m.name, reason=problem))
            log.warning("model %s failed to load: %s", m.name, problem)
            m.fail_waiters(load_failed_error(m))
            self._schedule()
            return
        m.loads += 1
        m.last_load_seconds = time.monotonic() - started
        m.loaded_at = time.time()
        m.ready_since = m.last_used = time.monotonic()
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
        self._spawn(m, self._unload(m, reason, for_model), "unload")

    async def _unload(self, m: ManagedModel, reason: str, for_model: str | None = None) -> None:
        # transition: READY -> UNLOADING (drain first: new requests are held meanwhile)
        self._set(m, ModelState.UNLOADING, f"unloading ({reason})")
        await self.ops.drain(lambda: m.in_flight > 0, self.config.server.timeouts.drain, self.changed)
        await self.ops.stop(m, reason)
        m.adopted = False
        # transition: UNLOADING -> UNLOADED
        self._set(m, ModelState.UNLOADED, f"unloaded ({reason})")
        self._emit(ModelEvent("unloaded", m.name, reason=reason, for_model=for_model))
        self._schedule()

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
