"""``orchestrator bench sampling``: greedy against probabilistic drafting at agents' temperatures.

llama.cpp b11434 samples the draft either greedily (the drafter's most likely token; the target
keeps it when its own sample matches) or probabilistically (``--spec-draft-sampling
probabilistic``: the draft is sampled and the target verifies it by rejection sampling, which at
temperature > 0 keeps a draft token with probability min(1, p/q)). The mode is a launch flag, the
temperature a request field, so each mode is one bench instance and every temperature is measured
on it: a draft-length sweep (:mod:`orchestrator.bench.runner`) at one K, per (mode, temperature),
on the model's own launch plan. Reported per cell: the acceptance rate (accepted over drafted
draft tokens, pooled), tokens per verification step, and the median decode tok/s over
repetitions. On the CPU bed (the tiny echo model) speed means little (docs/draft-length.md); the
acceptance rate is the figure that carries over.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.bench.args import parse_seeds
from orchestrator.bench.plan import has_patch
from orchestrator.bench.prompts import select_prompts
from orchestrator.bench.runner import Sweep, SweepProgress
from orchestrator.bench.stats import acceptance_rate, median, tokens_per_step
from orchestrator.bench.summary import RequestResult
from orchestrator.bench.sweep import BenchTarget
from orchestrator.errors import UserError
from orchestrator.launch.spec import InstanceSpec

MODES = ("greedy", "probabilistic")
DEFAULT_TEMPERATURES = (0.0, 0.6, 1.0)


@dataclass(frozen=True)
class Cell:
    """One (mode, temperature) of the comparison: pooled draft counts and decode rates."""

    mode: str
    temperature: float
    requests: int
    drafted: int
    accepted: int
    predicted: int
    acceptance: float
    tokens_per_step: float
    tps_median: float


def parse_temperatures(text: str) -> list[float]:
    """``"0,0.6,1.0"`` -> ``[0.0, 0.6, 1.0]``. Raises ``UserError`` for a bad or negative value."""
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--temperatures {text!r}: comma-separated numbers, e.g. 0,0.6,1.0") from None
    if not values or any(v < 0 for v in values):
        raise UserError(f"--temperatures {text!r}: at least one value, none negative")
    return values


def with_sampling(spec: InstanceSpec, mode: str) -> InstanceSpec:
    """``spec`` launched with ``--spec-draft-sampling mode``, named for the bench."""
    if spec.server.speculation is None:
        raise UserError(f"model {spec.model!r} runs without speculative decoding: there is no draft to sample")
    speculation = dataclasses.replace(spec.server.speculation, sampling=mode)
    server = dataclasses.replace(spec.server, speculation=speculation)
    return dataclasses.replace(spec, server=server, name=f"{spec.model}-{mode[:5]}")


def cell(mode: str, temperature: float, results: list[RequestResult]) -> Cell:
    """Pool one (mode, temperature)'s requests; the rate is per repetition (rep, seed), median over them."""
    drafted, accepted = sum(r.drafted for r in results), sum(r.accepted for r in results)
    predicted = sum(r.predicted_n for r in results)
    reps: dict[tuple[int, int], list[RequestResult]] = {}
    for r in results:
        reps.setdefault((r.rep, r.seed), []).append(r)
    rates = [
        1000.0 * sum(r.predicted_n for r in g) / ms for g in reps.values() if (ms := sum(r.predicted_ms for r in g)) > 0
    ]
    return Cell(
        mode,
        temperature,
        len(results),
        drafted,
        accepted,
        predicted,
        acceptance_rate(drafted, accepted),
        tokens_per_step(predicted, accepted),
        median(rates) if rates else float("nan"),
    )


@dataclass(frozen=True)
class SamplingOptions:
    """What the comparison runs: draft length ``k``, the temperatures, prompts and repetitions."""

    k: int
    temperatures: list[float]
    prompts: str
    n_predict: int
    reps: int
    seeds: list[int]


def check_options(
    *, k: int | None, temperatures: str, prompts: str, n_predict: int, reps: int, seeds: str, model_n_max: int
) -> SamplingOptions:
    """The checked options; ``k`` None takes the model's ``speculative.n_max``."""
    if n_predict < 1 or reps < 1:
        raise UserError("--n-predict and --reps must be >= 1")
    if k is not None and k < 1:
        raise UserError(f"--k must be >= 1 (a draft to sample), got {k}")
    return SamplingOptions(
        k or model_n_max, parse_temperatures(temperatures), prompts, n_predict, reps, parse_seeds(seeds)
    )


def run(target: BenchTarget, options: SamplingOptions, *, log_dir: Path, progress: SweepProgress | None) -> list[Cell]:
    """Measure every (mode, temperature): one instance per mode, stopped before the next mode's starts."""
    cells: list[Cell] = []
    for mode in MODES:
        if asyncio.run(_mode(target, options, mode, log_dir / mode, progress, cells)):
            break  # Ctrl-C: the cells measured so far, nothing more launched
    return cells


async def _mode(
    target: BenchTarget,
    options: SamplingOptions,
    mode: str,
    log_dir: Path,
    progress: SweepProgress | None,
    cells: list[Cell],
) -> bool:
    """Every temperature on one instance launched in ``mode`` (a cell each, into ``cells``);
    whether Ctrl-C interrupted it."""
    sweep = Sweep(
        config=target.bench_config,
        model=target.model,
        base=with_sampling(target.base, mode),
        ks=[options.k],
        prompts=select_prompts(options.prompts, None),
        n_predict=options.n_predict,
        reps=options.reps,
        seeds=options.seeds,
        temperature=options.temperatures[0],
        log_dir=log_dir,
        manifest_patched=has_patch(target.build.manifest),
        progress=progress,
    )
    async with sweep.running():
        for t in options.temperatures:
            sweep.temperature = t  # a request field: the instance stays
            done = await sweep.measure()
            cells.append(cell(mode, t, done.results))
            if done.interrupted:
                return True
    return False


def payload(target: BenchTarget, options: SamplingOptions, cells: list[Cell]) -> dict[str, Any]:
    """``sampling.json``: the settings, the launch command and every cell."""
    return {
        "model": target.model.name,
        "command_line": with_sampling(target.base, "MODE").command_line,  # MODE: greedy, probabilistic
        "settings": dataclasses.asdict(options),
        "cells": [dataclasses.asdict(c) for c in cells],
    }
