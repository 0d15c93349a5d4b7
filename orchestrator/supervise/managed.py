"""One model under the lifecycle (``ManagedModel``), a held request (``Waiter``) and a granted one
(``Lease``). ``orchestrator.supervise.scheduler.ModelScheduler`` is the only writer of their state.

A request in flight is counted once, on its replica (``Instance.in_flight``): the lease adds it when
granted and takes it back when released. ``least_busy`` is the one replica picker."""

from __future__ import annotations

import asyncio
import collections
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orchestrator.supervise.budget import need_per_device
from orchestrator.supervise.model_state import HOLDS_MEMORY, ModelState
from orchestrator.supervise.states import RUNNING, SERVING

if TYPE_CHECKING:
    from orchestrator.config.schema import ModelConfig, ServerConfig
    from orchestrator.supervise.instance import Instance


def model_need(instances: list[Instance]) -> dict[str, int]:
    """Bytes per device of a model's replicas, from their specs' ``memory`` estimates."""
    return need_per_device([(i.spec.gpus, i.spec.memory) for i in instances])


#: ``prefer(serving)``: the replica a request should go to (prefix affinity), or None for any.
Prefer = Callable[[list["Instance"]], "Instance | None"]


def least_busy(serving: list[Instance]) -> Instance | None:
    """The replica with the fewest requests in flight (then the fewest served), or None."""
    return min(serving, key=lambda i: (i.in_flight, i.requests)) if serving else None


class Waiter:
    """A request held until its model can take it. ``since``: monotonic arrival time (s);
    ``prefer``: its replica preference, if any."""

    __slots__ = ("future", "prefer", "since")

    def __init__(self, since: float, prefer: Prefer | None = None) -> None:
        self.future: asyncio.Future[Lease] = asyncio.get_running_loop().create_future()
        self.since = since
        self.prefer = prefer


class Lease:
    """A granted request: ``instance`` serves it until :meth:`release` (idempotent; also on ``with`` exit).

    While any lease of a model is out, the model is busy: never evicted, never unloaded for idleness.
    It is counted in ``instance.in_flight`` from the grant to the release.
    """

    __slots__ = ("_release", "_released", "instance", "model", "waited")

    def __init__(self, model: str, instance: Instance, release: Callable[[Lease], None], waited: float = 0.0) -> None:
        self.model = model
        self.instance = instance
        self.waited = waited  # seconds the request was held before this grant
        self._release = release
        self._released = False

    def release(self) -> None:
        """Give the lease back (the request finished, or failed, or its client left)."""
        if not self._released:
            self._released = True
            self._release(self)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


class ManagedModel:
    """The lifecycle record of one model: its replicas, need per device, state, held and granted requests.

    Read freely: ``state``, ``reason`` (why FAILED, why not loaded, what it waits for), ``need``
    (bytes per device), ``instances``, ``waiters``, ``in_flight`` (granted requests),
    ``last_used`` (``clock`` s), ``loads``, ``evictions``, ``last_load_seconds``.
    """

    def __init__(
        self,
        config: ModelConfig,
        instances: list[Instance],
        need: dict[str, int],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.clock = clock
        self.instances = instances
        self.need = need
        self.keep_alive: float | None = None  # idle seconds a client asked for (Ollama keep_alive)
        self.state = ModelState.UNLOADED
        self.reason: str | None = None
        self.failed_at = -math.inf
        self.waiters: collections.deque[Waiter] = collections.deque()
        self.wanted_since: float | None = None  # a load asked for without a held request
        self.last_used = clock()
        self.ready_since = -math.inf  # monotonic time it last became READY
        self.loaded_at: float | None = None  # Unix time, for people
        self.load_started: float | None = None  # monotonic, while LOADING
        self.last_load_seconds: float | None = None
        self.loads = 0
        self.evictions = 0
        self.closing = False  # another model waits for its memory: later requests are held
        self.draining: set[str] = set()  # replicas taking no new requests (reload)
        self.task: asyncio.Task[None] | None = None  # the running load or unload
        self.startup = False  # this load was started by `up`, not by a request
        self.adopted = False  # replicas were started outside the lifecycle (tests, tools)
        self.retry = False  # a person asked to load it again after it FAILED (load, reload)
        self.removed = False  # a reload removed it: 404 at once while it drains and stops

    @property
    def name(self) -> str:
        """The model name."""
        return self.config.name

    @property
    def in_flight(self) -> int:
        """Granted requests not yet released (counted on the replicas)."""
        return sum(i.in_flight for i in self.instances)

    @property
    def holds_memory(self) -> bool:
        """Loaded, loading or stopping: its need counts against the budget."""
        return self.state in HOLDS_MEMORY

    def ttl(self, server: ServerConfig) -> float | None:
        """Idle seconds before unload (model's ``ttl``, else ``server.ttl``); None = never, pinned included."""
        if self.config.pinned:
            return None
        if self.keep_alive is not None:
            return None if self.keep_alive < 0 else self.keep_alive
        value = self.config.ttl if self.config.ttl is not None else server.ttl
        return None if value == "never" else float(value)

    def set_keep_alive(self, seconds: float) -> None:
        """A client's idle time for this model, replacing its ``ttl`` until the next one (Ollama's
        ``keep_alive``: negative = never unload, 0 = unload once idle). Pinned models stay pinned."""
        self.keep_alive = seconds

    def queue_limit(self, server: ServerConfig) -> int:
        """Held requests allowed before 429."""
        return self.config.queue_limit or server.queue_limit

    def demand_since(self) -> float | None:
        """Monotonic time of the oldest held request or load wish; None when nobody wants it."""
        times = [w.since for w in self.waiters]
        if self.wanted_since is not None:
            times.append(self.wanted_since)
        return min(times) if times else None

    def serving(self) -> list[Instance]:
        """Replicas that may take a request now (serving, not draining)."""
        return [i for i in self.instances if i.state in SERVING and i.responsive and i.name not in self.draining]

    def pick(self, prefer: Prefer | None = None) -> Instance | None:
        """The serving replica ``prefer`` names (prefix affinity), else ``least_busy``'s, or None."""
        serving = self.serving()
        if serving and prefer is not None and (chosen := prefer(serving)) is not None:
            return chosen
        return least_busy(serving)

    def eligible(self, waiter: Waiter) -> bool:
        """Whether a held request may be granted: always, unless the model is closing for another model,
        then only requests that queued before it became ready (each swap serves what queued for it)."""
        return not self.closing or waiter.since <= self.ready_since

    def grantable(self) -> list[Waiter]:
        """Held requests that may be granted now, oldest first (stops at the first that may not)."""
        out = []
        for waiter in self.waiters:
            if waiter.future.done():
                continue
            if not self.eligible(waiter):
                break
            out.append(waiter)
        return out

    def grant(self, inst: Instance, waited: float, release: Callable[[Lease], None]) -> Lease:
        """Count a request on replica ``inst`` and return its lease (``release`` is called once, at the end)."""
        inst.in_flight += 1
        self.last_used = self.clock()
        return Lease(self.name, inst, release, waited)

    def release(self, lease: Lease) -> None:
        """Uncount a finished request; the model's idle time starts now."""
        lease.instance.in_flight -= 1
        self.last_used = self.clock()

    def fail_waiters(self, error: Exception) -> None:
        """Answer every held request (and any load wish) with ``error``."""
        self.wanted_since = None
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.future.done():
                waiter.future.set_exception(error)

    def busy(self) -> bool:
        """Requests in flight, a load in progress, or held requests that will be granted."""
        if self.in_flight or self.state is ModelState.LOADING:
            return True
        return self.state is ModelState.READY and any(self.eligible(w) for w in self.waiters)

    def snapshot(self, server: ServerConfig, now: float | None = None) -> dict[str, Any]:
        """One JSON-serialisable row for ``/status``, ``GET /v1/models``, ``orchestrator ps`` and the console.

        Times in seconds; memory in bytes per device (``"cpu"`` or a GPU index).
        """
        now = self.clock() if now is None else now
        ttl = self.ttl(server)
        idle = now - self.last_used if self.state is ModelState.READY and not self.in_flight else None
        loading_for = now - self.load_started if self.load_started is not None else None
        progress = None
        if loading_for is not None and self.last_load_seconds:
            progress = min(0.99, loading_for / self.last_load_seconds)  # estimated from the previous load
        return {
            "model": self.name,
            "state": self.state.value,
            "reason": self.reason,
            "load": self.config.load,
            "pinned": self.config.pinned,
            "ttl_s": ttl,
            "idle_s": idle,
            "unload_in_s": max(0.0, ttl - idle) if (ttl is not None and idle is not None) else None,
            "devices": sorted(self.need) or ["cpu"],
            "memory": dict(self.need),
            "memory_bytes": sum(self.need.values()),
            "in_flight": self.in_flight,
            "queued": len(self.waiters),
            "loads": self.loads,
            "evictions": self.evictions,
            "loaded_at": self.loaded_at,
            "loading_s": loading_for,
            "startup": self.state is ModelState.LOADING and (self.startup or self.adopted),
            "load_progress": progress,
            "last_load_s": self.last_load_seconds,
            "replicas": [
                {"name": i.name, "state": i.state.value, "pid": i.pid if i.state in RUNNING else None,
                 "base_url": i.base_url}
                for i in self.instances
            ],
        }  # fmt: skip
