"""The memory budget: will a model fit on its devices, and which loaded models must go first?

A device is ``"cpu"`` (host RAM) or a GPU index as text (``orchestrator.host.memory``). Its
capacity for our models is, in bytes:

- ``server.memory_budget[device]`` when set (tests, or people who want headroom), else
- ``total - server.memory_reserve``, lowered to ``ours + free - reserve`` when the device's live
  free memory says other processes (a desktop's browser, a game) hold part of it: ``ours`` is
  what our loaded models are estimated to use, so ``ours + free`` is roughly total minus others.

A model's need per device comes from its GGUF facts (``orchestrator.launch.fit.estimate_bytes``
plus compute headroom), split evenly over the GPUs of a multi-GPU replica and summed over its
replicas. :meth:`MemoryBudget.plan` is pure: it takes the holders (models loaded, loading or
stopping) and returns which idle models to evict now, which busy ones must drain first, or why
the model can never fit, with the numbers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from orchestrator.host.memory import CPU, DeviceMemory, read_devices

if TYPE_CHECKING:
    from orchestrator.config.schema import Config, ServerConfig

GIB = 2**30
_MEASURE_EVERY = 1.0  # seconds between live readings (NVML / nvidia-smi / psutil)


def fmt_bytes(n: float | None) -> str:
    """``"22.9 GiB"`` / ``"512.0 MiB"``; ``"?"`` for None."""
    if n is None:
        return "?"
    if abs(n) >= GIB:
        return f"{n / GIB:.1f} GiB"
    return f"{n / 2**20:.1f} MiB"


def device_label(key: str) -> str:
    """``"host RAM"`` for ``"cpu"``, ``"GPU 0"`` for ``"0"``."""
    return "host RAM" if key == CPU else f"GPU {key}"


@dataclass(frozen=True)
class Holder:
    """A model that holds memory (loaded, loading or stopping).

    ``need``: bytes per device. ``last_used``: monotonic seconds of its last request (LRU).
    ``busy``: requests in flight or queued for it. ``evictable``: loaded, not pinned, not
    already stopping or loading. ``stopping``: unloading now, so its memory is about to be free.
    """

    model: str
    need: Mapping[str, int]
    last_used: float
    busy: bool
    evictable: bool
    pinned: bool = False
    stopping: bool = False


@dataclass(frozen=True)
class FitPlan:
    """What loading a model takes.

    ``fits``: nothing else needed once ``evict`` have stopped and ``drain`` have drained and
    stopped. ``evict``: idle models to unload now (least recently used first). ``drain``: busy
    models that must finish their queued work first. ``blocked``: no plan exists right now
    (models loading or stopping hold the memory; retry when they settle). ``impossible``: the
    model can never fit (alone, or beside pinned models), with the numbers. ``stopping``: models
    unloading now whose memory the plan counts on (the load waits for them, and nothing more is
    evicted for the memory they free).
    """

    fits: bool
    evict: tuple[str, ...] = ()
    drain: tuple[str, ...] = ()
    blocked: bool = False
    impossible: str | None = None
    stopping: tuple[str, ...] = ()


@dataclass
class MemoryBudget:
    """Capacities per device, measured live (cached for a second) or overridden.

    Args:
        reserve: bytes left free on every device (``server.memory_reserve``).
        overrides: fixed capacities per device (``server.memory_budget``), bytes.
        measure: returns the devices' memory now (``orchestrator.host.memory.read_devices``).
    """

    reserve: int
    overrides: Mapping[str, int] = field(default_factory=dict)
    measure: Callable[[], Mapping[str, DeviceMemory]] | None = None
    _cache: Mapping[str, DeviceMemory] = field(default_factory=dict)
    _measured_at: float = -math.inf

    def devices(self) -> Mapping[str, DeviceMemory]:
        """The latest reading of every device (at most ``_MEASURE_EVERY`` s old)."""
        now = time.monotonic()
        if self.measure is not None and now - self._measured_at >= _MEASURE_EVERY:
            self._cache = self.measure()
            self._measured_at = now
        return self._cache

    def capacity(self, device: str, ours: int = 0) -> int | None:
        """Bytes our models may use on ``device`` while they hold ``ours`` bytes there; None = unknown
        (not limited)."""
        if device in self.overrides:
            return int(self.overrides[device])
        mem = self.devices().get(device)
        if mem is None or mem.total is None:
            return None
        cap = mem.total - self.reserve
        if mem.free is not None:
            cap = min(cap, ours + mem.free - self.reserve)
        return max(0, cap)

    def describe(self, device: str, ours: int = 0) -> str:
        """Where a capacity comes from, for messages: ``"budget 40.0 MiB (server.memory_budget)"``."""
        cap = self.capacity(device, ours)
        if device in self.overrides:
            return f"budget {fmt_bytes(cap)} (server.memory_budget)"
        mem = self.devices().get(device)
        if mem is None or mem.total is None:
            return "capacity unknown"
        others = "" if mem.free is None else f", {fmt_bytes(mem.free)} free now"
        return f"budget {fmt_bytes(cap)} ({fmt_bytes(mem.total)} total{others}, {fmt_bytes(self.reserve)} reserved)"

    def plan(self, model: str, need: Mapping[str, int], holders: list[Holder]) -> FitPlan:
        """Plan to fit ``model`` (``need`` bytes per device) beside ``holders`` (never including it).

        Least recently used idle models go first; busy ones only when idle ones are not enough
        (they drain first). Pinned models never go.
        """
        wanted = {d: n for d, n in need.items() if n > 0}
        used = {d: sum(h.need.get(d, 0) for h in holders) for d in wanted}
        caps = {d: self.capacity(d, used[d]) for d in wanted}
        for d, n in wanted.items():
            cap = caps[d]
            if cap is not None and n > cap:
                return FitPlan(
                    False,
                    impossible=f"model {model!r} needs {fmt_bytes(n)} of {device_label(d)} but the "
                    f"{self.describe(d, used[d])} is smaller, even with every other model unloaded",
                )
            pinned = [h for h in holders if h.pinned and h.need.get(d, 0) > 0]
            pinned_bytes = sum(h.need.get(d, 0) for h in pinned)
            if cap is not None and n + pinned_bytes > cap:
                who = ", ".join(f"{h.model} {fmt_bytes(h.need.get(d, 0))}" for h in pinned)
                return FitPlan(
                    False,
                    impossible=f"model {model!r} needs {fmt_bytes(n)} of {device_label(d)}; pinned models hold "
                    f"{fmt_bytes(pinned_bytes)} ({who}) of its {self.describe(d, used[d])}",
                )
        free = {d: (math.inf if caps[d] is None else caps[d] - used[d]) for d in wanted}  # type: ignore[operator]
        stopping = [h.model for h in holders if h.stopping and any(h.need.get(d, 0) > 0 for d in wanted)]
        for h in holders:
            if h.stopping:
                for d in wanted:
                    free[d] += h.need.get(d, 0)

        def short() -> list[str]:
            return [d for d in wanted if free[d] < wanted[d]]

        candidates = sorted(
            (h for h in holders if h.evictable and any(h.need.get(d, 0) > 0 for d in wanted)),
            key=lambda h: (h.busy, h.last_used),
        )
        evict: list[str] = []
        drain: list[str] = []
        for h in candidates:
            missing = short()
            if not missing:
                break
            if not any(h.need.get(d, 0) > 0 for d in missing):
                continue
            (drain if h.busy else evict).append(h.model)
            for d in wanted:
                free[d] += h.need.get(d, 0)
        if short():
            return FitPlan(False, evict=(), drain=(), blocked=True)
        return FitPlan(not drain and not stopping, evict=tuple(evict), drain=tuple(drain), stopping=tuple(stopping))


def need_per_device(replicas: list[tuple[tuple[int, ...], int | None]]) -> dict[str, int]:
    """Bytes per device for a model's replicas: ``[(gpus, bytes), ...]`` (``()`` = CPU; bytes None =
    unknown, counted as 0). A multi-GPU replica is split evenly."""
    need: dict[str, int] = {}
    for gpus, total in replicas:
        if not total:
            continue
        keys = [str(g) for g in gpus] or [CPU]
        for key in keys:
            need[key] = need.get(key, 0) + total // len(keys)
    return need


def follow_budget(budget: MemoryBudget, started: ServerConfig, config: Config) -> MemoryBudget:
    """``budget`` (made for the ``started`` server section) as ``config`` sets it: the same budget
    while ``memory_reserve`` and ``memory_budget`` are as they were, else one with the new values
    (the same live readings)."""
    server = config.server
    if (server.memory_reserve, server.memory_budget) == (started.memory_reserve, started.memory_budget):
        return budget
    return replace(
        budget, reserve=int(server.memory_reserve), overrides={k: int(v) for k, v in server.memory_budget.items()}
    )


def budget_for(server: ServerConfig, gpu_indices: list[int] | None = None) -> MemoryBudget:
    """The budget ``server`` describes: ``memory_reserve``, ``memory_budget`` overrides, live readings
    of host RAM and the GPUs (all, or ``gpu_indices``; ``[]`` = CPU only)."""
    return MemoryBudget(
        reserve=int(server.memory_reserve),
        overrides={k: int(v) for k, v in server.memory_budget.items()},
        measure=lambda: read_devices(gpu_indices),
    )
