"""Rules the model scheduler applies, as functions of the models' records (``ManagedModel``): who
holds memory and may be evicted, whose TTL ran out, what a held request waits for, the memory
table per device. ``ModelScheduler._schedule`` calls them; none changes a model.

The rules (``ModelState`` has the per-state table):

- A held request is granted once its model is READY with a serving replica.
- A model that is not loaded is loaded when its need fits the budget (``MemoryBudget``). If it
  does not, idle unpinned models on the devices it needs are evicted, least recently used first.
  Busy models (requests in flight, or held requests that queued before the swap) are never
  evicted: they are *closed* (requests arriving later are held) and evicted once drained. Held
  requests time out after ``server.timeouts.queue`` s with a 503 that says what they waited for.
- Demands are served oldest first; a later one never takes a device an earlier one waits for.
  Requests that queued while a model loaded are all served before it is swapped out, so
  alternating requests cannot thrash.
- A failed load (a replica exits, times out or is refused) answers its held requests with 503 and
  the log's reason; the model stays FAILED (503 at once, no ``Retry-After``) until ``load()`` or a
  reload asks again: a client's retries never reload a broken 20 GB model over and over.
- Idle READY models unload after their TTL, unless pinned.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from orchestrator.supervise.budget import Holder, MemoryBudget
from orchestrator.supervise.model_state import ModelState
from orchestrator.supervise.refusals import ModelRefused, Refusal
from orchestrator.supervise.states import RUNNING, SERVING, STARTING, TERMINAL, ProcessState

if TYPE_CHECKING:
    from orchestrator.config.schema import ServerConfig
    from orchestrator.supervise.managed import ManagedModel


RETRY_AFTER = 5.0  # seconds a client is told to wait after a 503/429 from the lifecycle


def holders(models: Iterable[ManagedModel], exclude: ManagedModel) -> list[Holder]:
    """Every model that holds memory (loaded, loading, stopping) but ``exclude``, as the budget sees it.

    Evictable: READY, not pinned, and loaded by the scheduler (replicas someone else started are
    only followed). Busy: ``ManagedModel.busy``.
    """
    return [
        Holder(
            model=m.name,
            need=m.need,
            last_used=m.last_used,
            busy=m.busy(),
            evictable=m.state is ModelState.READY and not m.config.pinned and not m.adopted,
            pinned=m.config.pinned,
            stopping=m.state is ModelState.UNLOADING,
        )
        for m in models
        if m is not exclude and m.holds_memory
    ]


def startup_misfit(m: ManagedModel, models: Iterable[ManagedModel], budget: MemoryBudget) -> str | None:
    """Why the on_start model ``m`` cannot load at start, or None when it fits beside the models
    started before it (on_start models never evict each other)."""
    plan = budget.plan(m.name, m.need, holders(models, exclude=m))
    if plan.fits and not plan.evict:
        return None
    return plan.impossible or "it does not fit beside the models loaded before it"


def expired(models: Iterable[ManagedModel], server: ServerConfig, now: float) -> list[ManagedModel]:
    """READY models idle (nothing in flight or held) for at least their TTL (``now``: monotonic s)."""
    out = []
    for m in models:
        ttl = m.ttl(server)
        if ttl is None or m.state is not ModelState.READY or m.adopted or m.in_flight or m.waiters:
            continue
        if now - m.last_used >= ttl:
            out.append(m)
    return out


def waiting_for(m: ManagedModel) -> str:
    """What a held request for ``m`` is waiting for, in words (for 503 messages and SSE comments)."""
    if m.state is ModelState.LOADING:
        return "loading"
    if m.state is ModelState.READY:
        if m.closing:
            return "another model is waiting for its memory"
        return "no replica serving: " + ", ".join(f"{i.name} {i.state.value}" for i in m.instances)
    if m.state is ModelState.UNLOADING:
        return "unloading"
    return m.reason or m.state.value


def follow_replicas(m: ManagedModel, *, idle: bool) -> tuple[ModelState, str | None] | None:
    """The state ``m`` should take after its replicas changed outside a load or unload (``idle``:
    no load, unload or restart task runs for it), or None.

    Replicas started by someone else (tests, tools) make it LOADING, then READY once all serve,
    or FAILED when they all failed before the scheduler ever ran the model; READY with every
    replica gone is FAILED (a crash loop, a load timeout) or UNLOADED (stopped).
    """
    states = [i.state for i in m.instances]
    if not states or not idle:
        return None
    if m.state is ModelState.UNLOADED and m.task is None and all(s is ProcessState.FAILED for s in states):
        return ModelState.FAILED, replica_failure(m)
    if m.state in (ModelState.UNLOADED, ModelState.FAILED) and any(s in RUNNING or s in STARTING for s in states):
        return ModelState.LOADING, "loading"
    if m.adopted and m.state is ModelState.LOADING:
        if all(s in SERVING for s in states):
            return ModelState.READY, None
        if all(s in TERMINAL for s in states):
            return ModelState.FAILED, replica_failure(m)
    if m.state is ModelState.READY and all(s in TERMINAL for s in states):
        if all(s is ProcessState.STOPPED for s in states):
            return ModelState.UNLOADED, "its replicas were stopped"
        return ModelState.FAILED, replica_failure(m)
    return None


def refuse_to_hold(m: ManagedModel, server: ServerConfig) -> ModelRefused | None:
    """Why a request for ``m`` that cannot be granted now is not held, or None to hold it:
    ``when_loading: reject`` (503 ``model_loading``) or ``queue_limit`` reached (429 ``queue_full``)."""
    if server.when_loading == "reject":
        return ModelRefused(
            Refusal.LOADING,
            f"model {m.name!r} is not ready yet ({waiting_for(m)}); retry later",
            retry_after=RETRY_AFTER,
        )
    if len(m.waiters) >= m.queue_limit(server):
        return ModelRefused(
            Refusal.QUEUE_FULL,
            f"model {m.name!r} already holds {len(m.waiters)} waiting requests (queue_limit); retry later",
            retry_after=RETRY_AFTER,
        )
    return None


def load_failed_error(m: ManagedModel) -> ModelRefused:
    """The refusal of requests held by a load that failed (no Retry-After: it would fail again)."""
    return ModelRefused(Refusal.LOAD_FAILED, f"model {m.name!r} failed to load: {m.reason}")


def removed_error(name: str) -> ModelRefused:
    """The refusal of a model a reload removed (also while it drains and stops)."""
    return ModelRefused(Refusal.REMOVED, f"model {name!r} was removed from models.yaml", param="model")


def unavailable_error(m: ManagedModel) -> ModelRefused:
    """The refusal of a request to a FAILED model: the reason and what to do, no Retry-After."""
    return ModelRefused(
        Refusal.UNAVAILABLE,
        f"model {m.name!r} failed: {m.reason}; fix it, then `orchestrator load {m.name}` (or edit models.yaml)",
    )


def replica_failure(m: ManagedModel) -> str:
    """Why a model's replicas are gone: the first failed or restarting replica's message."""
    for inst in m.instances:
        if inst.state in (ProcessState.FAILED, ProcessState.RESTARTING):
            return f"{inst.name}: {inst.message}"
    return "its replicas stopped"


def memory_table(models: Iterable[ManagedModel], budget: MemoryBudget) -> dict[str, dict[str, Any]]:
    """Per device: ``capacity`` (bytes or None = unknown), ``used`` (our estimate, bytes), ``models``
    holding memory there, and ``source`` (where the capacity comes from, in words)."""
    models = list(models)
    out: dict[str, dict[str, Any]] = {}
    for device in sorted(set(budget.overrides) | {d for m in models for d in m.need}):
        there = [m for m in models if m.holds_memory and m.need.get(device)]
        used = sum(m.need[device] for m in there)
        out[device] = {
            "capacity": budget.capacity(device, used),
            "used": used,
            "models": [m.name for m in there],
            "source": budget.describe(device, used),
        }
    return out
