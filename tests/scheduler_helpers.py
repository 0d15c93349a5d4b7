"""Helpers for the model lifecycle tests: several tiny models, a stack with a memory budget, waits.

Each tiny model is a distinct file (``write_tiny_model`` with its own seed), about 10 MiB by the
fit estimate at a 512-token context, so a ``memory_budget`` of ``room_for(n)`` holds ``n`` of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from proxy_harness import Stack
from supervision_helpers import fast_policy

from orchestrator.config.schema import Config, ModelConfig, ServerConfig, Timeouts
from orchestrator.launch.plan import plan_launch
from orchestrator.launch.spec import InstanceSpec
from orchestrator.native.capabilities import probe_capabilities
from orchestrator.supervise.model_state import ModelState, SchedulerPolicy
from orchestrator.supervise.states import RUNNING

MIB = 2**20
TINY_NEED = 10.2 * MIB  # fit estimate of one tiny model at ctx 512 (weights + KV + recurrent state)


def room_for(n: int) -> int:
    """A CPU budget (bytes) that holds ``n`` tiny models but not ``n + 1``."""
    return int(TINY_NEED * (n + 0.5))


def tiny_models(folder: Path, count: int) -> list[Path]:
    """``count`` distinct tiny models (seeds 1..count) in ``folder``, written once per session."""
    from orchestrator.models.tiny import write_tiny_model

    paths = []
    for seed in range(1, count + 1):
        path = folder / f"tiny-seed{seed}.gguf"
        if not path.exists():
            write_tiny_model(path, mode="echo", q=0.0, seed=seed)
        paths.append(path)
    return paths


def lifecycle_config(
    models: list[dict[str, Any]], *, budget: int | None = None, server: dict[str, Any] | None = None
) -> Config:
    """The config of ``lifecycle_stack``: ``models`` (ModelConfig fields; each needs ``name`` and
    ``path``) on the CPU, short timeouts, a CPU ``memory_budget`` of ``budget`` bytes."""
    server = dict(server or {})
    server.setdefault("timeouts", Timeouts(load=120, keepalive=0.05, queue=120, drain=60))
    server.setdefault("memory_reserve", 0)
    if budget is not None:
        server["memory_budget"] = {"cpu": budget}
    defaults = {"ctx_size": 512, "threads": 1, "load": "on_demand"}
    return Config(server=ServerConfig(**server), models=[ModelConfig(**{**defaults, **m}) for m in models])


def plan(config: Config, build: Any) -> list[InstanceSpec]:
    """The launch plan of ``config`` on the CPU (what ``up`` and a reload compute)."""
    return plan_launch(config, gpus=[], build=build, capabilities=probe_capabilities(build), check_ports=False)


def lifecycle_stack(
    tmp_path: Path,
    build: Any,
    models: list[dict[str, Any]],
    *,
    budget: int | None = None,
    server: dict[str, Any] | None = None,
    tick: float = 0.2,
    start: bool = True,
) -> Stack:
    """A proxy + Supervisor + ModelScheduler over real llama-servers (CPU) for ``models`` (ModelConfig
    fields; each needs ``name`` and ``path``), with a CPU ``memory_budget`` of ``budget`` bytes."""
    config = lifecycle_config(models, budget=budget, server=server)
    policy = SchedulerPolicy(tick=tick, stop_grace=3.0)
    stack = Stack(config, plan(config, build), tmp_path / "logs", policy=fast_policy(), scheduler_policy=policy)
    if start:
        try:
            stack.run(stack.scheduler.start())
        except BaseException:
            stack.close()
            raise
    return stack


def wait_until(what: str, check: Callable[[], Any], timeout: float = 60.0, every: float = 0.02) -> Any:
    """Poll ``check`` until it returns something truthy (returned); AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def state(stack: Stack, model: str) -> ModelState:
    """The lifecycle state of ``model``."""
    return stack.scheduler.models[model].state


def pids(stack: Stack, model: str) -> list[int | None]:
    """The pids of ``model``'s replicas (None when not running)."""
    return [i.pid if i.state in RUNNING else None for i in stack.scheduler.models[model].instances]


def chat(model: str, text: str = "hello", max_tokens: int = 8, stream: bool = False) -> dict[str, Any]:
    """A small greedy chat request body for ``model``."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
    }
