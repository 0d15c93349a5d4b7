"""GPU placement of replicas: explicit GPU lists, ``gpus: auto`` round-robin, tensor-split ratios."""

from __future__ import annotations

from orchestrator.config.schema import Config, ModelConfig
from orchestrator.errors import UserError
from orchestrator.host.gpus import GPU


class Placer:
    """Assigns ``gpus: auto`` replicas: the GPU with the fewest instances so far, then the
    most free memory, then the lowest index (plain round-robin on identical GPUs). Explicit
    GPU lists count too, so auto replicas go around them."""

    def __init__(self, gpus: list[GPU]) -> None:
        self.count = {g.index: 0 for g in gpus}
        self.gpus = gpus

    def take(self) -> int:
        """The GPU index for the next ``auto`` replica."""
        best = min(self.gpus, key=lambda g: (self.count[g.index], -(g.memory_free or 0), g.index))
        self.count[best.index] += 1
        return best.index

    def note(self, indices: tuple[int, ...]) -> None:
        """Count an explicitly placed replica on ``indices``."""
        for index in indices:
            if index in self.count:
                self.count[index] += 1


def placements(config: Config, i: int, model: ModelConfig, usable: list[GPU], placer: Placer) -> list[tuple[int, ...]]:
    """The GPU indices of each replica of ``config.models[i]`` (``()`` = CPU).

    Raises:
        UserError: a GPU index that is not among ``usable``, naming the models.yaml key.
    """
    known = {g.index for g in usable}

    def check(indices: list[int], loc: tuple[str | int, ...]) -> tuple[int, ...]:
        missing = [x for x in indices if x not in known]
        if missing:
            have = ", ".join(str(x) for x in sorted(known)) if known else "none (no usable GPU or a CPU-only build)"
            raise UserError(
                f"{config.where('models', i, *loc)}: model {model.name!r} asks for GPU {', '.join(map(str, missing))}, "
                f"which is not available; GPUs here: {have}",
                hint="write gpus: auto (CPU when there is no GPU) or list indices that `nvidia-smi -L` shows",
            )
        placer.note(tuple(indices))
        return tuple(indices)

    if isinstance(model.replicas, list):
        return [check(lst, ("replicas", r)) for r, lst in enumerate(model.replicas)]
    if isinstance(model.gpus, list):
        assigned = check(model.gpus, ("gpus",))
        return [assigned] * model.replicas
    if not usable:
        return [()] * model.replicas
    return [(placer.take(),) for _ in range(model.replicas)]


def tensor_split(assigned: tuple[int, ...], usable: list[GPU]) -> str | None:
    """Proportions by total memory in GiB (stable from run to run); None when unknown, so
    llama.cpp splits by free memory itself."""
    by_index = {g.index: g for g in usable}
    totals = [by_index[x].memory_total for x in assigned if x in by_index]
    if len(totals) != len(assigned) or any(t is None for t in totals):
        return None
    return ",".join(str(max(1, round(t / 2**30))) for t in totals if t is not None)
