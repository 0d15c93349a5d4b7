"""The model scheduler's decisions as tables of events, with fake effects and no llama-server
(``tests/scheduler_fakes.py``): load on demand, eviction (least recently used, never a busy
model), swap fairness, queueing and its limits, TTL and keep_alive, failed loads, a crash, the
commands, and reload decisions. ``tests/supervise/test_scheduler.py`` keeps the same paths honest
on real processes.

Every tiny model here needs 1 GiB of host RAM; ``budget_gb`` says how many fit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from scheduler_fakes import World, config, spec

from orchestrator.config.schema import Timeouts
from orchestrator.supervise.rollout import RestartRequired

A, B, C = {"name": "a"}, {"name": "b"}, {"name": "c"}


def assert_plays(make: Callable[[], World], body: Callable[[World], Awaitable[None]]) -> None:
    async def main() -> None:
        world = make()
        try:
            await body(world)
        finally:
            await world.close()

    asyncio.run(main())


def assert_table(cfg: Any, rows: list[tuple[Any, ...]], specs: Any = None) -> None:
    """Play ``rows`` against a fresh world: each expectation row (``state``, ``effects``, ``granted``,
    ``refused``, ...) asserts, and the first that does not hold fails the test naming its row."""
    assert_plays(lambda: World(cfg, specs), lambda w: w.run(rows))


def test_a_request_loads_its_model_and_is_granted_once_it_serves() -> None:
    assert_table(config([A, B], budget_gb=2.5), [
        ("state", {"a": "unloaded", "b": "unloaded"}),
        ("request", "a"), ("waiting", "a"), ("state", {"a": "loading"}), ("effects", [("start", "a")]),
        ("loaded", "a"), ("granted", "a"), ("state", {"a": "ready", "b": "unloaded"}),
        ("request", "a"), ("granted", "a"), ("effects", []),  # ready: no effect, granted at once
        ("request", "b"), ("effects", [("start", "b")]), ("loaded", "b"), ("granted", "b"),
        ("state", {"a": "ready", "b": "ready"}),  # room for both: nothing evicted
    ])  # fmt: skip


def test_an_idle_model_is_evicted_least_recently_used_first() -> None:
    assert_table(config([A, B, C], budget_gb=2.5), [
        ("request", "a"), ("loaded", "a"), ("granted", "a"), ("finish", "a"),
        ("advance", 1), ("request", "b"), ("loaded", "b"), ("granted", "b"), ("finish", "b"),
        ("advance", 1), ("request", "a"), ("granted", "a"), ("finish", "a"),  # a is now the most recent
        ("effects", [("start", "a"), ("start", "b")]),
        ("request", "c"),
        ("effects", [("stop", "b", "memory"), ("start", "c")]),  # b was used least recently
        ("loaded", "c"), ("granted", "c"), ("state", {"a": "ready", "b": "unloaded", "c": "ready"}),
    ])  # fmt: skip


def test_a_busy_model_is_closed_not_evicted_and_swapped_once_it_drains() -> None:
    assert_table(config([A, B], budget_gb=1.5), [
        ("request", "a"), ("loaded", "a"), ("granted", "a"),  # one request in flight on a
        ("request", "b"), ("waiting", "b"), ("reason", "b", "waiting for a to unload"),
        ("effects", [("start", "a")]), ("state", {"a": "ready", "b": "unloaded"}),
        ("advance", 1), ("request", "a"), ("waiting", "a"),  # a is closing: a later request is held
        ("finish", "a"), ("effects", [("stop", "a", "memory"), ("start", "b")]),
        ("loaded", "b"), ("granted", "b"), ("state", {"a": "unloaded", "b": "ready"}),
        ("finish", "b"), ("effects", [("stop", "b", "memory"), ("start", "a")]),  # the held a swaps back
        ("loaded", "a"), ("granted", "a"),
    ])  # fmt: skip


def test_requests_queued_during_a_load_are_all_served_before_the_swap() -> None:
    """Alternating requests for two models that do not fit together take one swap, not one each."""
    assert_table(config([A, B], budget_gb=1.5), [
        ("request", "a"), ("request", "b"), ("request", "a"), ("request", "b"),
        ("effects", [("start", "a")]),
        ("loaded", "a"), ("granted", "a"), ("granted", "a"), ("waiting", "b", 2),
        ("finish", "a"), ("effects", []), ("finish", "a"),
        ("effects", [("stop", "a", "memory"), ("start", "b")]),
        ("loaded", "b"), ("granted", "b"), ("granted", "b"),
        ("state", {"a": "unloaded", "b": "ready"}),
    ])  # fmt: skip


def test_the_oldest_demand_is_served_first() -> None:
    assert_table(config([A, B, C], budget_gb=1.5), [
        ("request", "a"), ("loaded", "a"), ("granted", "a"),
        ("advance", 1), ("request", "b"), ("advance", 1), ("request", "c"),
        ("reason", "c", "waiting for an earlier request's model to load"),
        ("finish", "a"), ("effects", [("start", "a"), ("stop", "a", "memory"), ("start", "b")]),
        ("loaded", "b"), ("granted", "b"), ("waiting", "c"), ("finish", "b"),
        ("effects", [("stop", "b", "memory"), ("start", "c")]), ("loaded", "c"), ("granted", "c"),
    ])  # fmt: skip


def test_a_model_that_can_never_fit_is_refused_at_once_with_the_numbers() -> None:
    assert_table(config([A], budget_gb=0.5), [
        ("request", "a"), ("refused", "a", 503, "model_too_large", "a"), ("effects", []),
        ("state", {"a": "unloaded"}),
    ])  # fmt: skip


def test_the_queue_limit_and_when_loading_reject() -> None:
    assert_table(config([A], queue_limit=2), [
        ("request", "a"), ("request", "a"), ("request", "a"),
        ("refused", "a", 429, "queue_full"),  # the refused one is the third; the others wait
        ("loaded", "a"), ("granted", "a"), ("granted", "a"),
    ])  # fmt: skip
    assert_table(config([A], when_loading="reject"), [
        ("request", "a"), ("refused", "a", 503, "model_loading"),
        ("effects", [("start", "a")]),  # the refusal starts the load all the same
        ("loaded", "a"), ("request", "a"), ("granted", "a"),
    ])  # fmt: skip


def test_a_held_request_times_out_saying_what_it_waited_for() -> None:
    cfg = config([A], timeouts=Timeouts(queue=0.05))

    async def body(w: World) -> None:
        await w.run([("request", "a"), ("effects", [("start", "a")])])
        await asyncio.sleep(0.2)  # the queue timeout is real time
        await w.run([("refused", "a", 503, "model_loading", "after waiting 0.05 s", "loading")])

    assert_plays(lambda: World(cfg), body)


def test_an_idle_model_unloads_after_its_ttl_unless_pinned_or_kept_alive() -> None:
    assert_table(config([{**A, "ttl": 60}, {**B, "pinned": True, "ttl": 60}, {**C, "ttl": 60}], budget_gb=3.5), [
        ("request", "a"), ("loaded", "a"), ("granted", "a"),
        ("request", "b"), ("loaded", "b"), ("granted", "b"),
        ("request", "c"), ("loaded", "c"), ("granted", "c"),
        ("finish", "a"), ("finish", "b"), ("finish", "c"),
        ("effects", [("start", "a"), ("start", "b"), ("start", "c")]),
        ("keep_alive", "c", -1),  # a client asked: never
        ("advance", 59), ("effects", []), ("state", {"a": "ready"}),
        ("advance", 2), ("effects", [("stop", "a", "ttl")]),
        ("state", {"a": "unloaded", "b": "ready", "c": "ready"}),
        ("keep_alive", "c", 0), ("advance", 0), ("effects", [("stop", "c", "ttl")]),  # 0: unload once idle
    ])  # fmt: skip


def test_a_busy_model_never_unloads_for_idleness() -> None:
    assert_table(config([{**A, "ttl": 10}]), [
        ("request", "a"), ("loaded", "a"), ("granted", "a"),
        ("advance", 1000), ("effects", [("start", "a")]), ("state", {"a": "ready"}),
        ("finish", "a"), ("advance", 9), ("effects", []), ("advance", 1), ("effects", [("stop", "a", "ttl")]),
    ])  # fmt: skip


def test_a_failed_load_answers_its_held_requests_and_is_not_retried_by_clients() -> None:
    assert_table(config([A]), [
        ("request", "a"), ("request", "a"), ("load_fails", "a", "a-0 exited with status 1 while loading"),
        ("refused", "a", 503, "model_load_failed", "exited with status 1"),
        ("refused", "a", 503, "model_load_failed"),
        ("state", {"a": "failed"}), ("effects", [("start", "a"), ("stop_replicas", "a-0")]),
        ("request", "a"), ("refused", "a", 503, "model_unavailable", "orchestrator load a"),
        ("effects", []),  # a client's retry never reloads it
        ("load", "a"), ("effects", [("start", "a")]), ("loaded", "a"), ("state", {"a": "ready"}),
    ])  # fmt: skip


def test_a_crash_of_every_replica_fails_the_model_and_its_next_request() -> None:
    assert_table(config([A]), [
        ("request", "a"), ("loaded", "a"), ("granted", "a"), ("finish", "a"),
        ("crash", "a"), ("state", {"a": "failed"}), ("reason", "a", "exited with status 1"),
        ("request", "a"), ("refused", "a", 503, "model_unavailable"),
    ])  # fmt: skip


def test_unload_cancels_a_load_and_drains_a_ready_model() -> None:
    assert_table(config([A], when_loading="reject"), [
        ("request", "a"), ("refused", "a", 503, "model_loading"), ("effects", [("start", "a")]),
        ("unload", "a"), ("state", {"a": "unloaded"}), ("effects", [("stop_replicas", "a-0")]),
    ])  # fmt: skip
    assert_table(config([A]), [
        ("request", "a"), ("effects", [("start", "a")]),
        ("unload", "a"), ("effects", [("stop_replicas", "a-0"), ("start", "a")]),  # a held request wants it
        ("loaded", "a"), ("state", {"a": "ready"}), ("granted", "a"),
        ("unload", "a"), ("state", {"a": "unloading"}), ("effects", []),  # one in flight: it drains
        ("finish", "a"), ("state", {"a": "unloaded"}), ("effects", [("stop", "a", "request")]),
    ])  # fmt: skip


def test_a_reload_removes_adds_and_restarts_one_replica_at_a_time() -> None:
    before = config([A, {**B, "replicas": 2}, {**C}], budget_gb=5)
    specs = [spec("a"), spec("b", 1, 0), spec("b", 1, 1), spec("c")]
    after = config([{**B, "replicas": 2}, {**C, "aliases": ["see"]}, {"name": "d", "load": "on_start"}], budget_gb=5)
    new_specs = [spec("b", 1, 0, "--flag"), spec("b", 1, 1, "--flag"), spec("c"), spec("d")]
    assert_table(before, [
        ("request", "a"), ("loaded", "a"), ("granted", "a"),
        ("request", "b"), ("loaded", "b"), ("granted", "b"),
        ("effects", [("start", "a"), ("start", "b")]),
        ("apply", after, new_specs),
        ("request", "a"), ("refused", "a", 404, "model_not_found", "removed"),  # at once, while a drains
        ("state", {"a": "unloading", "b": "ready", "c": "unloaded"}),
        ("finish", "a"), ("state", {"a": "gone"}),
        # d is added (on_start: it loads); b restarts one replica at a time, after its request ends
        ("effects", [("add", "d-0"), ("start", "d"), ("stop", "a", "reload"), ("forget", "a-0")]),
        ("finish", "b"),
        ("effects", [("stop_replicas", "b-0"), ("replace", "b-0"), ("launch", "b-0"),
                     ("stop_replicas", "b-1"), ("replace", "b-1"), ("launch", "b-1")]),
        ("loaded", "d"), ("state", {"b": "ready", "c": "unloaded", "d": "ready"}),
        ("request", "b"), ("granted", "b"),
    ], specs)  # fmt: skip


def test_a_reload_that_needs_a_restart_changes_nothing() -> None:
    async def body(w: World) -> None:
        with pytest.raises(RestartRequired):
            await w.scheduler.apply(config([B], port=1), [spec("b")])
        assert set(w.scheduler.models) == {"a"} and w.scheduler.config.models[0].name == "a"
        assert w.effects.log == []

    assert_plays(lambda: World(config([A])), body)


def test_a_pinned_model_is_never_evicted_and_what_cannot_fit_beside_it_is_refused() -> None:
    assert_table(config([{**A, "pinned": True}, B], budget_gb=1.5), [
        ("request", "a"), ("loaded", "a"), ("granted", "a"), ("finish", "a"),
        ("request", "b"), ("refused", "b", 503, "model_too_large", "pinned models hold"),
        ("effects", [("start", "a")]), ("state", {"a": "ready", "b": "unloaded"}),
    ])  # fmt: skip


def test_a_restart_rolls_one_replica_at_a_time_after_its_requests_end() -> None:
    specs = [spec("a", 0.5, 0), spec("a", 0.5, 1)]
    assert_table(config([{**A, "replicas": 2}]), [
        ("request", "a"), ("loaded", "a"), ("granted", "a"), ("effects", [("start", "a")]),
        ("restart", "a"), ("effects", []),  # the request on a-0 drains first
        ("request", "a"), ("granted", "a"),  # a-1 still serves meanwhile
        ("finish", "a"),
        ("effects", [("stop_replicas", "a-0"), ("replace", "a-0"), ("launch", "a-0")]),
        ("finish", "a"),
        ("effects", [("stop_replicas", "a-1"), ("replace", "a-1"), ("launch", "a-1")]),
        ("state", {"a": "ready"}), ("request", "a"), ("granted", "a"),
    ], specs)  # fmt: skip


def test_a_reload_of_settings_only_restarts_nothing() -> None:
    async def body(w: World) -> None:
        await w.run(
            [("request", "a"), ("loaded", "a"), ("granted", "a"), ("finish", "a"), ("effects", [("start", "a")])]
        )
        report = await w.scheduler.apply(config([{**A, "ttl": 5, "aliases": ["alpha"]}]), [spec("a")])
        assert report.summary() == "updated a"
        await w.run([("effects", []), ("state", {"a": "ready"}), ("advance", 6), ("effects", [("stop", "a", "ttl")])])

    assert_plays(lambda: World(config([A])), body)
