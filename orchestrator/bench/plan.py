"""The plan of a bench sweep: its variants (llama-server configurations), the interleaved
request order, the bench copy of an instance spec, the patch check on the build manifest, and the
config a bench or tune plans with (narrowed to its model, with the context its deepest prompt
needs, within the model's trained context). See :mod:`orchestrator.bench.sweep` for how a sweep runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.bench.prompts import depth_label
from orchestrator.config.schema import Config, ModelConfig
from orchestrator.errors import UserError
from orchestrator.launch.files import facts_at, model_files
from orchestrator.launch.spec import InstanceSpec, with_draft_length, with_port

PATCH_NAME = "per-request-draft-length"  # substring of the patch file name in the build manifest


@dataclass
class Variant:
    """One llama-server configuration of the sweep.

    ``ks``: the draft lengths measured on it; ``per_request``: K travels as a request field
    (patched binary) rather than as the launch flag.
    """

    spec: InstanceSpec
    ks: tuple[int, ...]
    per_request: bool = False

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class Task:
    """One request of the sweep: repetition ``rep``, sampling ``seed``, prompt index, K, variant index."""

    rep: int
    seed: int
    prompt_index: int
    k: int
    variant: int


def schedule(
    variants: Sequence[Variant], *, n_prompts: int, reps: int, seeds: Sequence[int], together: bool
) -> list[Task]:
    """The request order of the sweep.

    ``together`` (all instances up at once): per round, per seed, per prompt, every K once,
    the K order rotated by round + prompt so no K always follows the same one. Otherwise
    (one instance at a time): per round the variants in snake order (forward on even rounds,
    backward on odd ones), and inside a variant per seed, per prompt, its Ks rotated alike.
    """
    tasks: list[Task] = []

    def rotated(ks: Sequence[int], by: int) -> list[int]:
        if not ks:
            return []
        by %= len(ks)
        return list(ks[by:]) + list(ks[:by])

    owner = {k: i for i, v in enumerate(variants) for k in v.ks}
    all_ks = sorted(owner)
    for rep in range(reps):
        if together:
            for seed in seeds:
                for p in range(n_prompts):
                    tasks.extend(Task(rep, seed, p, k, owner[k]) for k in rotated(all_ks, rep + p))
            continue
        order = list(range(len(variants)))
        if rep % 2:
            order.reverse()
        for vi in order:
            for seed in seeds:
                for p in range(n_prompts):
                    tasks.extend(Task(rep, seed, p, k, vi) for k in rotated(variants[vi].ks, rep + p))
    return tasks


def bench_spec(spec: InstanceSpec, *, suffix: str, n_max: int | None) -> InstanceSpec:
    """A copy of ``spec`` for the bench: its own name, an OS-picked port, and (for a speculative
    spec) ``--spec-draft-n-max n_max`` with ``--spec-draft-n-min`` lowered to at most ``n_max``."""
    if n_max is not None and spec.spec_type is not None:
        n_min = min(spec.n_min if spec.n_min is not None else 0, n_max)
        moved = with_draft_length(spec, n_max=n_max, n_min=n_min, port=0)
    else:
        moved = with_port(spec, 0)
    return dataclasses.replace(moved, name=f"{spec.model}-bench-{suffix}")


def has_patch(manifest: dict[str, Any]) -> bool:
    """Whether the build manifest lists the per-request draft-length patch."""
    for patch in manifest.get("patches") or []:
        name = patch.get("name") if isinstance(patch, dict) else patch
        if isinstance(name, str) and PATCH_NAME in name:
            return True
    return False


def check_depths(config: Config, model: ModelConfig, ctx: int, deepest: int) -> None:
    """Refuse ``--depths`` whose deepest prompt needs more context per slot (``ctx``) than the
    model's ``ctx_size`` gives and its GGUF was trained for: the raised ``ctx_size`` is the run's,
    not the user's, so the launch plan's message (which names models.yaml's ``ctx_size``) would
    blame the wrong thing.

    Raises:
        UserError: naming ``--depths``, the context needed, the trained context and the deepest
            depth that fits.
    """
    if ctx <= model.ctx_size // model.parallel or model.allow_ctx_beyond_trained:
        return  # within the user's own ctx_size: the plan checks that as theirs
    i = config.models.index(model)
    gguf, _ = model_files(config, i, model)
    trained = facts_at(config, i, model, gguf, ("path",)).context_length
    if not trained or ctx <= trained:
        return
    fits = trained - (ctx - deepest)
    example = f"{fits // 1024}k" if fits >= 1024 else str(max(fits, 0))
    raise UserError(
        f"--depths {depth_label(deepest).lower()}: the deepest prompt needs {ctx} tokens of context per slot "
        f"(its {deepest} tokens, the question and the answer), more than {model.name!r} was trained for "
        f"({trained} tokens); the run would raise ctx_size beyond it",
        hint=f"use depths up to {max(fits, 0)} tokens (e.g. --depths {example}), or set allow_ctx_beyond_trained: "
        f"true for {model.name!r} in {config.path or 'models.yaml'} (quality beyond the trained length is the model's)",
    )


def bench_config(config: Config, model: ModelConfig, ctx: int = 0) -> Config:
    """The config narrowed to ``model``, with the acceptance fallback off (the bench wants every
    K measured as launched, and reports low acceptance itself) and at least ``ctx`` tokens of
    context per slot (the deepest prompt)."""
    spec = model.speculative.model_copy(update={"spec_fallback": "warn"})
    one = model.model_copy(update={"speculative": spec, "ctx_size": max(model.ctx_size, ctx * model.parallel)})
    narrowed = config.model_copy(update={"models": [one]})
    narrowed.path = config.path
    return narrowed


def fit_config(config: Config, model: ModelConfig, n_max: int | None, ctx: int = 0) -> Config:
    """The whole config (every model at its own index, so located messages name the right
    line) with ``model`` planned at the sweep's largest draft length and deepest prompt
    (``ctx`` tokens per slot) and without fallback."""
    spec = model.speculative.model_copy(update={"spec_fallback": "warn"})
    if n_max is not None and n_max > spec.n_max:
        spec = spec.model_copy(update={"n_max": n_max})
    one = model.model_copy(update={"speculative": spec, "ctx_size": max(model.ctx_size, ctx * model.parallel)})
    planned = config.model_copy(update={"models": [one if m is model else m for m in config.models]})
    planned.path = config.path
    return planned
