"""Will the planned llama-servers fit? GPU memory is a hard check, CPU RAM a warning.

Per instance, the need in bytes comes from ``models.memory.estimate_memory(facts, ctx, parallel)``
(weights + KV cache + compute buffers). An instance on several GPUs (``--tensor-split``) is
counted in equal shares. A GPU's need is compared with its free memory as NVML/nvidia-smi
reported it; a GPU that does not report free memory is not checked (said in a note, never
guessed). On CPU the weights are mmapped, so exceeding available RAM is allowed but noted.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil

from orchestrator.errors import UserError
from orchestrator.host.gpus import GPU
from orchestrator.models.facts import ModelFacts
from orchestrator.models.memory import estimate_memory

GIB = 2**30
# llama.cpp's compute buffers come on top of weights + KV (hundreds of MiB on large models).
COMPUTE_HEADROOM = 512 * 2**20


@dataclass(frozen=True)
class FitRequest:
    """One instance's memory need. ``gpus`` () = CPU; ``bytes_needed`` None = unknown."""

    instance: str
    where: str
    gpus: tuple[int, ...]
    bytes_needed: int | None
    partial_offload: bool = False


def estimate_bytes(
    facts: ModelFacts, ctx: int, parallel: int, *, draft_n_max: int = 0, draft_facts: ModelFacts | None = None
) -> int:
    """Estimated bytes for one llama-server: ``models.memory.estimate_memory`` (weights, KV cache
    for ``ctx`` tokens over ``parallel`` slots, recurrent state; the NextN block and its KV
    only when ``draft_n_max`` > 0), plus a separate draft GGUF's weights. Compute buffers are
    not included (``check_fit`` adds ``COMPUTE_HEADROOM`` per GPU instance).
    """
    total = estimate_memory(facts, ctx, parallel, draft_n_max=draft_n_max).total
    if draft_facts is not None:
        total += draft_facts.weights_bytes
    return total


def gib(n: int | float) -> str:
    """``"22.9 GiB"``."""
    return f"{n / GIB:.1f} GiB"


def check_fit(requests: list[FitRequest], gpus: list[GPU], *, force: bool = False) -> dict[str, list[str]]:
    """Check every GPU's summed need against its free memory, and CPU instances against RAM.

    Returns:
        notes per instance name (forced overcommit, unchecked GPUs, CPU RAM warnings).
    Raises:
        UserError: a GPU would be overcommitted and ``force`` is False; the message gives the
        need per instance, the free memory, and what to change.
    """
    notes: dict[str, list[str]] = {}
    by_index = {g.index: g for g in gpus}
    need: dict[int, float] = {}
    users: dict[int, list[tuple[FitRequest, float]]] = {}
    for req in requests:
        if not req.gpus:
            continue
        if req.partial_offload:
            notes.setdefault(req.instance, []).append("partial offload (gpu_layers): GPU fit not checked")
            continue
        if req.bytes_needed is None:
            notes.setdefault(req.instance, []).append("memory need unknown: GPU fit not checked")
            continue
        share = (req.bytes_needed + COMPUTE_HEADROOM) / len(req.gpus)
        for index in req.gpus:
            need[index] = need.get(index, 0.0) + share
            users.setdefault(index, []).append((req, share))
    failures: list[str] = []
    for index, total in sorted(need.items()):
        gpu = by_index.get(index)
        if gpu is None or gpu.memory_free is None:
            for req, _ in users[index]:
                notes.setdefault(req.instance, []).append(f"GPU {index} does not report free memory: fit not checked")
            continue
        if total > gpu.memory_free:
            who = ", ".join(f"{req.instance} {gib(share)} ({req.where})" for req, share in users[index])
            failures.append(
                f"GPU {index} ({gpu.name}): needs {gib(total)} [{who}; each with {gib(COMPUTE_HEADROOM)} for compute "
                f"buffers] but {gib(gpu.memory_free)} is free"
            )
    if failures and not force:
        raise UserError(
            "the plan does not fit in GPU memory:\n  " + "\n  ".join(failures),
            hint="lower ctx_size or parallel, use a smaller quantisation, spread replicas over more GPUs, "
            "or pass --force to launch anyway",
        )
    for line in failures:
        for index in need:
            if line.startswith(f"GPU {index} "):
                for req, _ in users[index]:
                    notes.setdefault(req.instance, []).append(f"forced: {line}")
    _note_cpu_ram(requests, notes)
    return notes


def _note_cpu_ram(requests: list[FitRequest], notes: dict[str, list[str]]) -> None:
    """Warn each CPU instance when all of them together need more than the available RAM."""
    cpu = [r for r in requests if not r.gpus and r.bytes_needed is not None]
    if not cpu:
        return
    available = psutil.virtual_memory().available
    total_cpu = sum(r.bytes_needed or 0 for r in cpu)
    if total_cpu > available:
        for req in cpu:
            notes.setdefault(req.instance, []).append(
                f"CPU instances need about {gib(total_cpu)} but {gib(available)} RAM is available; "
                "expect swapping or an out-of-memory kill"
            )
