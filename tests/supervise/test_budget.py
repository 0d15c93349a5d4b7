"""The memory budget (``orchestrator.supervise.budget``): capacities, eviction plans, the numbers in
its refusals. Pure: devices are given as values, nothing is measured."""

from __future__ import annotations

from orchestrator.host.memory import DeviceMemory
from orchestrator.supervise.budget import Holder, MemoryBudget, budget_for, need_per_device

MIB = 2**20
GIB = 2**30


def budget(**overrides: int) -> MemoryBudget:
    return MemoryBudget(reserve=0, overrides=overrides)


def holder(name: str, mib: int, *, last_used: float = 0.0, busy: bool = False, pinned: bool = False,
           evictable: bool = True, device: str = "0") -> Holder:  # fmt: skip
    return Holder(name, {device: mib * MIB}, last_used, busy, evictable and not pinned, pinned)


def test_fits_without_eviction_when_there_is_room() -> None:
    plan = budget(**{"0": 100 * MIB}).plan("b", {"0": 40 * MIB}, [holder("a", 50)])
    assert plan.fits and plan.evict == () and plan.drain == ()


def test_evicts_idle_models_least_recently_used_first_and_only_as_many_as_needed() -> None:
    holders = [holder("new", 30, last_used=3.0), holder("old", 30, last_used=1.0), holder("mid", 30, last_used=2.0)]
    plan = budget(**{"0": 100 * MIB}).plan("b", {"0": 40 * MIB}, holders)
    assert plan.fits and plan.evict == ("old",)
    plan = budget(**{"0": 100 * MIB}).plan("b", {"0": 70 * MIB}, holders)
    assert plan.evict == ("old", "mid")


def test_memory_a_stopping_model_frees_is_counted_on_and_not_evicted_for_twice() -> None:
    """An eviction already under way frees its memory soon: the load waits for it, and no other
    idle model is evicted for the same bytes (they were: every idle model went for one load)."""
    stopping = Holder("going", {"0": 50 * MIB}, 0.0, False, False, stopping=True)
    idle = holder("idle", 40, last_used=1.0)
    plan = budget(**{"0": 100 * MIB}).plan("b", {"0": 50 * MIB}, [stopping, idle])
    assert not plan.fits and plan.evict == () and plan.stopping == ("going",) and not plan.blocked
    plan = budget(**{"0": 100 * MIB}).plan("b", {"0": 80 * MIB}, [stopping, idle])  # not enough alone
    assert plan.evict == ("idle",) and plan.stopping == ("going",)


def test_busy_models_drain_rather_than_being_evicted_and_go_after_idle_ones() -> None:
    holders = [holder("busy", 50, last_used=0.0, busy=True), holder("idle", 40, last_used=5.0)]
    plan = budget(**{"0": 100 * MIB}).plan("b", {"0": 50 * MIB}, holders)
    assert plan.fits and plan.evict == ("idle",) and plan.drain == ()
    plan = budget(**{"0": 100 * MIB}).plan("b", {"0": 90 * MIB}, holders)
    assert not plan.fits and plan.evict == ("idle",) and plan.drain == ("busy",)


def test_pinned_models_stay_and_a_model_too_large_beside_them_is_refused_with_the_numbers() -> None:
    plan = budget(**{"0": 100 * MIB}).plan("b", {"0": 60 * MIB}, [holder("pin", 50, pinned=True)])
    assert not plan.fits and plan.impossible is not None
    assert "pinned" in plan.impossible and "50.0 MiB" in plan.impossible and "60.0 MiB" in plan.impossible


def test_a_model_larger_than_the_device_is_refused_with_the_numbers() -> None:
    plan = budget(cpu=64 * MIB).plan("big", {"cpu": 80 * MIB}, [])
    assert plan.impossible is not None
    assert "80.0 MiB" in plan.impossible and "64.0 MiB" in plan.impossible and "host RAM" in plan.impossible


def test_models_loading_or_stopping_block_rather_than_being_evicted() -> None:
    plan = budget(**{"0": 100 * MIB}).plan("b", {"0": 60 * MIB}, [holder("loading", 50, evictable=False, busy=True)])
    assert plan.blocked and not plan.fits and plan.evict == ()


def test_only_models_on_the_needed_devices_are_evicted() -> None:
    holders = [holder("gpu1", 90, device="1", last_used=0.0), holder("gpu0", 90, device="0", last_used=5.0)]
    plan = budget(**{"0": 100 * MIB, "1": 100 * MIB}).plan("b", {"0": 50 * MIB}, holders)
    assert plan.evict == ("gpu0",)


def test_live_free_memory_lowers_the_capacity_when_other_processes_use_the_device() -> None:
    def measure() -> dict[str, DeviceMemory]:
        # 24 GiB card: our models hold ~10 GiB, something else ~8 GiB, 6 GiB free
        return {"0": DeviceMemory("0", "card", 24 * GIB, 6 * GIB)}

    b = MemoryBudget(reserve=GIB, measure=measure)
    assert b.capacity("0", ours=10 * GIB) == 15 * GIB  # ours + free - reserve, below total - reserve
    assert b.capacity("0", ours=19 * GIB) == 23 * GIB  # never above total - reserve
    plan = b.plan("b", {"0": 6 * GIB}, [holder("a", 10 * 1024)])
    assert plan.evict == ("a",)


def test_need_splits_multi_gpu_replicas_evenly_and_sums_replicas() -> None:
    assert need_per_device([((0, 1), 100), ((0,), 10), ((), 7), ((), None)]) == {"0": 60, "1": 50, "cpu": 7}


def test_budget_from_the_server_config() -> None:
    from orchestrator.config.schema import ServerConfig

    b = budget_for(ServerConfig(memory_budget={"cpu": "64MiB", 0: "1GiB"}, memory_reserve="0"), gpu_indices=[])
    assert b.capacity("cpu") == 64 * MIB and b.capacity("0") == GIB
    assert b.capacity("7") is None  # unknown device: not limited, never guessed
