"""The model scheduler without processes: a fake ``Effects`` and a table runner.

``FakeEffects`` does what ``orchestrator.supervise.replicas.ReplicaOps`` does to real llama-servers,
to ``FakeReplica`` records instead, and writes each effect to ``log``; a model's load ends when the
test says (``loaded`` / ``load_fails``) and its clock moves only when the test says (``advance``).
``World`` builds a ``ModelScheduler`` over them and runs tables of events and expectations::

    await world.run([
        ("request", "a"), ("effects", [("start", "a")]),
        ("loaded", "a"), ("granted", "a"),
        ("state", {"a": "ready"}),
    ])

Events: ``request`` (a client asks for the model), ``loaded`` / ``load_fails`` (its load ends),
``finish`` (the oldest granted request of the model ends), ``advance`` (the clock moves, then a
tick), ``crash`` (every replica of the model fails), ``load`` / ``unload`` / ``restart`` / ``keep_alive``
(commands), ``apply`` (a reload: ``(config, specs)``). Expectations: ``state`` (models' states),
``effects`` (what was done since the last check, in order), ``granted`` (the oldest answered
request of the model got a lease), ``refused`` (it got this status and code), ``waiting`` (how
many are still held), ``reason`` (a model's reason contains the text).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from types import SimpleNamespace
from typing import Any

from supervision_helpers import fake_spec

from orchestrator.config.running import RunningConfig
from orchestrator.config.schema import Config, ModelConfig, ServerConfig, Timeouts
from orchestrator.launch.spec import InstanceSpec
from orchestrator.serve.routing import refused_to_http
from orchestrator.supervise.budget import MemoryBudget
from orchestrator.supervise.managed import Lease, ManagedModel
from orchestrator.supervise.model_state import SchedulerPolicy
from orchestrator.supervise.refusals import ModelRefused
from orchestrator.supervise.scheduler import ModelScheduler
from orchestrator.supervise.states import TERMINAL, ProcessState

GB = 2**30
SETTLE = 50  # loop turns after each event: every task that can run without the clock has run


class FakeReplica:
    """What the scheduler reads of a replica: name, spec, state, responsive, in_flight, requests."""

    def __init__(self, spec: InstanceSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.state = ProcessState.STOPPED
        self.responsive = True
        self.message: str | None = None
        self.pid: int | None = None
        self.base_url: str | None = None
        self.requests = 0
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @in_flight.setter
    def in_flight(self, value: int) -> None:
        self.requests += max(0, value - self._in_flight)
        self._in_flight = max(0, value)


class FakeEffects:
    """``Effects`` on ``FakeReplica`` records, logged; loads end when the test resolves them."""

    def __init__(self) -> None:
        self.before_ready: list[Any] = []
        self.before_stop: list[Any] = []
        self.clock = 1000.0
        self.log: list[tuple[Any, ...]] = []
        self.loads: dict[str, asyncio.Future[str | None]] = {}
        self._changed = asyncio.Event()

    def now(self) -> float:
        return self.clock

    async def changed(self, timeout: float) -> None:
        """One loop turn: the caller re-checks its condition on every turn (its deadlines follow
        the fake clock, so nothing times out unless the test advances it)."""
        await asyncio.sleep(0)

    async def start(self, m: ManagedModel) -> str | None:
        self.log.append(("start", m.name))
        for inst in m.instances:
            inst.state = ProcessState.LOADING
        future = self.loads[m.name] = asyncio.get_running_loop().create_future()
        try:
            problem = await future
        finally:
            self.loads.pop(m.name, None)
        for inst in m.instances:  # a failed load: the child exited while loading
            inst.state = ProcessState.READY if problem is None else ProcessState.RESTARTING
            inst.message = problem
        if problem is None:
            for hook in self.before_ready:
                await hook(m, "load")
        return problem

    async def launch(self, instances: list[Any]) -> str | None:
        self.log.append(("launch", *(i.name for i in instances)))
        for inst in instances:
            inst.state = ProcessState.READY
        return None

    async def stop(self, m: ManagedModel, reason: str, grace: float | None = None) -> None:
        if all(i.state in TERMINAL for i in m.instances):
            return
        self.log.append(("stop", m.name, reason))
        await self.run_before_stop(m, reason)
        for inst in m.instances:
            inst.state = ProcessState.STOPPED

    async def run_before_stop(self, m: ManagedModel, reason: str) -> None:
        for hook in self.before_stop:
            await hook(m, reason)

    async def stop_replicas(self, instances: list[Any], grace: float | None = None) -> None:
        running = [i for i in instances if i.state not in TERMINAL]
        if running:
            self.log.append(("stop_replicas", *(i.name for i in running)))
        for inst in running:
            inst.state = ProcessState.STOPPED

    def add(self, spec: InstanceSpec) -> Any:
        self.log.append(("add", spec.name))
        return FakeReplica(spec)

    def replace(self, old: Any, spec: InstanceSpec) -> Any:
        self.log.append(("replace", spec.name))
        return FakeReplica(spec)

    def forget(self, inst: Any) -> None:
        self.log.append(("forget", inst.name))


def spec(model: str, gb: float = 1.0, replica: int = 0, *flags: str) -> InstanceSpec:
    """A launch spec of ``model`` needing ``gb`` GiB of host RAM (never started)."""
    return dataclasses.replace(fake_spec(*flags, name=f"{model}-{replica}", alias=model), memory=int(gb * GB))


def config(models: list[dict[str, Any]], budget_gb: float = 1.5, **server: Any) -> Config:
    """A config of ``models`` (ModelConfig fields; on demand by default) with a host RAM budget."""
    server.setdefault("timeouts", Timeouts(queue=30, drain=30))
    server = {"memory_budget": {"cpu": int(budget_gb * GB)}, "memory_reserve": 0, **server}
    return Config(
        server=ServerConfig(**server),
        models=[ModelConfig(**{"path": "/unused.gguf", "load": "on_demand", **m}) for m in models],
    )


class World:
    """A ``ModelScheduler`` over ``FakeEffects`` (build it inside the event loop), and its tables."""

    def __init__(self, cfg: Config, specs: list[InstanceSpec] | None = None) -> None:
        specs = specs if specs is not None else [spec(m.name) for m in cfg.models]
        self.effects = FakeEffects()
        replicas: dict[str, list[Any]] = {}
        for s in specs:
            replicas.setdefault(s.model, []).append(FakeReplica(s))
        supervisor = SimpleNamespace(running=RunningConfig(cfg), for_model=lambda name: replicas.get(name, []))
        budget = MemoryBudget(reserve=0, overrides=dict(cfg.server.memory_budget))
        policy = SchedulerPolicy(tick=0.005, stop_grace=0.0)
        self.scheduler = ModelScheduler(supervisor, budget, policy, effects=self.effects)  # type: ignore[arg-type]
        self.requests: dict[str, deque[asyncio.Task[Lease]]] = {}
        self.leases: dict[str, deque[Lease]] = {}
        self.pending: list[asyncio.Task[Any]] = []

    async def settle(self) -> None:
        for _ in range(SETTLE):
            await asyncio.sleep(0)

    async def run(self, table: list[tuple[Any, ...]]) -> None:
        """Play ``table`` (see the module); an unmet expectation names its row."""
        for row, (kind, *args) in enumerate(table):
            try:
                await getattr(self, f"_{kind}")(*args)
                await self.settle()
            except AssertionError as err:
                raise AssertionError(f"row {row} {(kind, *args)}: {err}") from None

    async def close(self) -> None:
        await self.scheduler.close(0.0)
        tasks = [*self.pending, *(t for q in self.requests.values() for t in q)]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ events

    async def _request(self, model: str) -> None:
        task = asyncio.get_running_loop().create_task(self.scheduler.acquire(model))
        self.requests.setdefault(model, deque()).append(task)

    async def _loaded(self, model: str) -> None:
        await self.settle()
        assert model in self.effects.loads, f"{model} is not loading"
        self.effects.loads[model].set_result(None)

    async def _load_fails(self, model: str, why: str) -> None:
        await self.settle()
        assert model in self.effects.loads, f"{model} is not loading"
        self.effects.loads[model].set_result(why)

    async def _finish(self, model: str) -> None:
        self.leases[model].popleft().release()

    async def _advance(self, seconds: float) -> None:
        self.effects.clock += seconds
        self.scheduler.tick()

    async def _crash(self, model: str) -> None:
        for inst in self.scheduler.models[model].instances:
            inst.state = ProcessState.FAILED
            inst.message = "exited with status 1"
        self.scheduler.tick()

    async def _load(self, model: str) -> None:
        self.pending.append(asyncio.get_running_loop().create_task(self.scheduler.load(model)))

    async def _unload(self, model: str) -> None:
        self.pending.append(asyncio.get_running_loop().create_task(self.scheduler.unload(model)))

    async def _restart(self, model: str) -> None:
        self.pending.append(asyncio.get_running_loop().create_task(self.scheduler.restart(model)))

    async def _keep_alive(self, model: str, seconds: float) -> None:
        self.scheduler.keep_alive(model, seconds)

    async def _apply(self, cfg: Config, specs: list[InstanceSpec]) -> None:
        self.pending.append(asyncio.get_running_loop().create_task(self.scheduler.apply(cfg, specs)))

    # ------------------------------------------------------------------ expectations

    async def _state(self, expected: dict[str, str]) -> None:
        now = {name: self.scheduler.models[name].state.value for name in expected if name in self.scheduler.models}
        assert now == {k: v for k, v in expected.items() if v != "gone"}, now
        gone = [k for k, v in expected.items() if v == "gone"]
        assert not [k for k in gone if k in self.scheduler.models], f"{gone} should be gone"

    async def _effects(self, expected: list[tuple[Any, ...]]) -> None:
        done, self.effects.log = self.effects.log, []
        assert done == expected, done

    def _answered(self, model: str) -> asyncio.Task[Lease]:
        """The oldest request for ``model`` that has its answer (taken off the list)."""
        done = [t for t in self.requests.get(model, ()) if t.done()]
        assert done, f"every request for {model} is still held"
        self.requests[model].remove(done[0])
        return done[0]

    async def _granted(self, model: str) -> None:
        task = self._answered(model)
        assert task.exception() is None, repr(task.exception())
        self.leases.setdefault(model, deque()).append(task.result())

    async def _waiting(self, model: str, count: int = 1) -> None:
        held = [t for t in self.requests.get(model, ()) if not t.done()]
        assert len(held) == count, f"{len(held)} held for {model}, expected {count}"

    async def _refused(self, model: str, status: int, code: str, *words: str) -> None:
        refused = self._answered(model).exception()
        # the scheduler refuses in its own terms; the rows say what a client gets (serve maps it)
        assert isinstance(refused, ModelRefused), repr(refused)
        err = refused_to_http(refused)
        assert (err.status, err.code) == (status, code), (err.status, err.code, str(err))
        for word in words:
            assert word in str(err), str(err)

    async def _reason(self, model: str, text: str) -> None:
        reason = self.scheduler.models[model].reason or ""
        assert text in reason, reason
