"""Will the planned llama-servers fit? GPU memory is a hard check, CPU RAM a warning.

Per instance, the need in bytes is:

- ``models.memory.estimate_memory(facts, ctx, parallel)``: weights (minus the routed experts
  ``--n-cpu-moe N`` keeps in CPU memory), KV cache, recurrent state, the NextN block with MTP;
- ``gpu_overhead``: per GPU a margin for the CUDA context (llama.cpp's own --fit margin), plus
  the compute buffers of the target context and, with MTP, of the draft context (see
  ``gpu_overhead`` for the formula and its sources).

An instance on several GPUs is counted in the proportions the launch splits it by
(``--tensor-split``, by total memory; by free memory when llama.cpp decides). A GPU's need is
compared with its free memory as NVML/nvidia-smi reported it; a GPU that does not report free
memory is not checked (said in a note, never guessed). On CPU the weights are mmapped, so
exceeding available RAM is allowed but noted. A plan that does not fit is refused with the
numbers and, for a MoE model, the ``--n-cpu-moe`` that would make it fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil

from orchestrator.errors import UserError
from orchestrator.host.gpus import GPU
from orchestrator.models.facts import ModelFacts

if TYPE_CHECKING:
    from orchestrator.config.schema import Config
    from orchestrator.launch.spec import InstanceSpec
from orchestrator.models.memory import estimate_memory

GIB = 2**30
MIB = 2**20
# The compute allowance of a request built without model facts (the check's only allowance
# before it counted the logits, the MTP draft context and the device margin).
COMPUTE_HEADROOM = 512 * MIB
# A llama.cpp context's compute buffers besides the logits (activations, attention, MoE and
# gated delta-net scratch at one ubatch).
GRAPH_SCRATCH = 256 * MIB
# Per GPU: the CUDA context, cuBLAS workspace, CUDA graphs and ggml's memory pool, none of which
# the free memory reported before the launch knows of. llama.cpp's own --fit keeps the same
# margin free per device (common/common.h, fit_params_target = 1024 MiB).
DEVICE_MARGIN = 1024 * MIB
N_UBATCH = 512  # llama-server's default -ub (physical batch, tokens)


@dataclass(frozen=True)
class FitRequest:
    """One instance's memory need. ``gpus`` () = CPU; ``bytes_needed`` None = unknown.

    Attributes:
        bytes_needed: weights on the GPU + KV cache + recurrent state (bytes).
        overhead: ``gpu_overhead`` (bytes): device margin and compute buffers, on each GPU.
        shares: the fraction of ``bytes_needed`` on each GPU of ``gpus``; None = equal shares.
        expert_layer_bytes: routed-expert bytes per block still on the GPU, for the
            ``--n-cpu-moe`` hint.
        n_cpu_moe: the ``--n-cpu-moe`` already in ``extra_args``.
        remote_free: free bytes on the instance's RPC workers (models.yaml ``rpc:``), probed at
            plan time; llama.cpp places layers there too, so only the rest must fit locally.
    """

    instance: str
    where: str
    gpus: tuple[int, ...]
    bytes_needed: int | None
    partial_offload: bool = False
    overhead: int = DEVICE_MARGIN + COMPUTE_HEADROOM
    shares: tuple[float, ...] | None = None
    expert_layer_bytes: tuple[int, ...] = ()
    n_cpu_moe: int = 0
    remote_free: int = 0


def estimate_bytes(
    facts: ModelFacts,
    ctx: int,
    parallel: int,
    *,
    draft_n_max: int = 0,
    draft_facts: ModelFacts | None = None,
    n_cpu_moe: int = 0,
    kv_types: tuple[str | None, str | None] = (None, None),
) -> int:
    """Estimated bytes for one llama-server: ``models.memory.estimate_memory`` (weights, KV cache
    for ``ctx`` tokens over ``parallel`` slots, recurrent state; the NextN block and its KV
    only when ``draft_n_max`` > 0), plus a separate draft GGUF's weights, minus the routed
    experts of the first ``n_cpu_moe`` blocks (llama.cpp ``--n-cpu-moe``: kept in CPU memory).
    ``kv_types``: ``cache_type_k``, ``cache_type_v`` (None: llama-server's f16). A separate draft
    GGUF counts its own file's weights (``draft_facts``, read from that file), never the target's.
    Compute buffers and the CUDA context are not included (``gpu_overhead``).
    """
    k_type, v_type = kv_types[0] or "f16", kv_types[1] or "f16"
    total = estimate_memory(facts, ctx, parallel, k_type, draft_n_max=draft_n_max, kv_type_v=v_type).total
    if draft_facts is not None:
        # the draft file's weights, and its NextN layers' KV (ctx cells, f16: the draft's own cache types)
        width = (draft_facts.head_count_kv or 0) * ((draft_facts.key_length or 0) + (draft_facts.value_length or 0))
        total += draft_facts.weights_bytes + (ctx * draft_facts.nextn_layers * width * 2 if draft_n_max else 0)
    return total - sum(facts.expert_layer_bytes[:n_cpu_moe])


def gpu_overhead(facts: ModelFacts, parallel: int, *, draft_n_max: int = 0, ubatch: int = N_UBATCH) -> int:
    """Bytes one llama-server takes on each of its GPUs beyond weights, KV and recurrent state.

    ``DEVICE_MARGIN`` + the target context's compute buffers + (with MTP) the draft context's:

    - target: ``GRAPH_SCRATCH`` + ``ubatch * n_vocab * 4``: llama.cpp reserves the worst-case
      prompt graph with one output row per token of the physical batch (src/llama-context.cpp,
      ``n_outputs_pp = min(n_tokens, n_outputs_max)``, ``n_outputs_max`` = ``n_batch`` by default),
      so the F32 logits of a full ubatch sit in the compute buffer (485 MiB for a 248,320-token
      vocabulary);
    - MTP draft: its own context on the same model (common/speculative.cpp, ``LLAMA_CONTEXT_TYPE_MTP``)
      with its own compute buffers: ``GRAPH_SCRATCH`` + ``parallel * (draft_n_max + 1) * n_vocab * 4``.

    A larger ``draft_n_max`` (the bench sweeps up to 8) also grows the recurrent state, which
    ``estimate_bytes`` counts. Unknown vocabulary counts as 0 rows.
    """
    logits_row = facts.output_rows * 4
    target = GRAPH_SCRATCH + ubatch * logits_row
    draft = GRAPH_SCRATCH + parallel * (draft_n_max + 1) * logits_row if draft_n_max > 0 else 0
    return DEVICE_MARGIN + target + draft


def gib(n: int | float) -> str:
    """``"22.9 GiB"``."""
    return f"{n / GIB:.1f} GiB"


def check_fit(requests: list[FitRequest], gpus: list[GPU], *, force: bool = False) -> dict[str, list[str]]:
    """Check every GPU's summed need against its free memory, and CPU instances against RAM.

    Returns:
        notes per instance name (its need on each GPU that fits, forced overcommit, unchecked
        GPUs, CPU RAM warnings).
    Raises:
        UserError: a GPU would be overcommitted, or CPU instances need more than the machine's RAM,
        and ``force`` is False; the message gives the
        need per instance, the free memory, and what to change (``--n-cpu-moe N`` for a MoE
        model on one GPU, when some N makes it fit).
    """
    notes: dict[str, list[str]] = {}
    need, users = _needs(requests, notes)
    by_index = {g.index: g for g in gpus}
    failures: list[tuple[int, str]] = []
    for index, total in sorted(need.items()):
        gpu = by_index.get(index)
        if gpu is None or gpu.memory_free is None:
            for req, _ in users[index]:
                notes.setdefault(req.instance, []).append(f"GPU {index} does not report free memory: fit not checked")
            continue
        if total <= gpu.memory_free:
            for req, share in users[index]:
                notes.setdefault(req.instance, []).append(
                    f"GPU {index}: needs about {gib(share)} (with the CUDA context and compute buffers); "
                    f"{gib(gpu.memory_free)} is free"
                )
            continue
        if total > gpu.memory_free:
            who = ", ".join(f"{req.instance} {gib(share)} ({req.where})" for req, share in users[index])
            failures.append(
                (
                    index,
                    f"GPU {index} ({gpu.name}): needs {gib(total)} [{who}; with the CUDA context and compute "
                    f"buffers] but {gib(gpu.memory_free)} is free",
                )
            )
    if failures and not force:
        hints = [h for index, _ in failures for h in _cpu_moe_hints(users[index], need[index], by_index[index])]
        raise UserError(
            "the plan does not fit in GPU memory:\n  " + "\n  ".join(line for _, line in failures),
            hint="; ".join(hints) + ("; or " if hints else "") + "lower ctx_size or parallel, use a smaller "
            "quantisation, spread replicas over more GPUs, or pass --force to launch anyway",
        )
    for index, line in failures:
        for req, _ in users[index]:
            notes.setdefault(req.instance, []).append(f"forced: {line}")
    _check_cpu_ram(requests, notes, force)
    return notes


def _needs(
    requests: list[FitRequest], notes: dict[str, list[str]]
) -> tuple[dict[int, float], dict[int, list[tuple[FitRequest, float]]]]:
    """Bytes needed per GPU index, and who needs them (request, its bytes on that GPU)."""
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
        shares = req.shares or tuple(1 / len(req.gpus) for _ in req.gpus)
        local = max(0, req.bytes_needed - req.remote_free)  # the RPC workers hold the rest
        for index, fraction in zip(req.gpus, shares, strict=True):
            mine = local * fraction + req.overhead
            need[index] = need.get(index, 0.0) + mine
            users.setdefault(index, []).append((req, mine))
    return need, users


def _cpu_moe_hints(users: list[tuple[FitRequest, float]], total: float, gpu: GPU) -> list[str]:
    """For a MoE instance alone on one GPU: the least ``--n-cpu-moe N`` that makes it fit."""
    if len(users) != 1 or gpu.memory_free is None:
        return []
    req = users[0][0]
    layers = req.expert_layer_bytes[req.n_cpu_moe :]
    if len(req.gpus) != 1 or not layers:
        return []
    over, moved = total - gpu.memory_free, 0
    for n, layer in enumerate(layers, start=1):
        moved += layer
        if moved >= over:
            keep = req.n_cpu_moe + n
            return [
                f"{req.where}: add extra_args: ['--n-cpu-moe', '{keep}'] to keep the experts of the first {keep} "
                f"layers in CPU RAM ({gib(sum(req.expert_layer_bytes[:keep]))}; decode gets slower, no --force needed)"
            ]
    return []


def _check_cpu_ram(requests: list[FitRequest], notes: dict[str, list[str]], force: bool) -> None:
    """CPU instances: refuse when together they need more than the machine's RAM (unless ``force``), and
    warn each when they need more than the RAM available now.

    Raises:
        UserError: the need exceeds total RAM; names each instance's models.yaml entry.
    """
    cpu = [r for r in requests if not r.gpus and r.bytes_needed is not None]
    if not cpu:
        return
    memory = psutil.virtual_memory()
    total_cpu = sum(r.bytes_needed or 0 for r in cpu)
    if total_cpu > memory.total and not force:
        who = ", ".join(f"{r.instance} {gib(r.bytes_needed or 0)} ({r.where})" for r in cpu)
        raise UserError(
            f"the CPU instances need about {gib(total_cpu)} [{who}] but this machine has {gib(memory.total)} of RAM",
            hint="lower ctx_size or parallel, use a smaller quantisation, or pass --force to launch anyway",
        )
    if total_cpu > memory.available:
        for req in cpu:
            notes.setdefault(req.instance, []).append(
                f"CPU instances need about {gib(total_cpu)} but {gib(memory.available)} RAM is available; "
                "expect swapping or an out-of-memory kill"
            )


def check_fit_per_model(
    config: Config, specs: list[InstanceSpec], requests: list[FitRequest], gpus: list[GPU], force: bool
) -> dict[str, list[str]]:
    """``check_fit`` for each model alone: the model scheduler swaps models that do not fit together.
    A model loaded on demand is never refused here: its requests get 503 ``model_too_large`` with
    the numbers instead (models found in ``models_dirs`` may be of any size).

    Returns:
        notes per instance name. Raises ``UserError`` as ``check_fit``.
    """
    notes: dict[str, list[str]] = {}
    model_of = {s.name: s.model for s in specs}
    for model in config.models:
        mine = [r for r in requests if model_of.get(r.instance) == model.name]
        for name, lines in check_fit(mine, gpus, force=force or model.load == "on_demand").items():
            notes.setdefault(name, []).extend(lines)
    return notes


def instance_memory(request: FitRequest) -> int | None:
    """The model scheduler's estimate for one instance (bytes): its need plus, on each of its GPUs,
    the overhead the fit check counts (CUDA context, compute buffers); None when unknown."""
    if not request.bytes_needed:
        return None
    return request.bytes_needed + (request.overhead * len(request.gpus) if request.gpus else 0)


def cpu_moe_layers(extra_args: list[str], n_blocks: int) -> int:
    """Blocks whose routed experts ``extra_args`` keeps in CPU memory: ``--n-cpu-moe N`` /
    ``-ncmoe N`` (also ``=N``) -> N; ``--cpu-moe`` / ``-cmoe`` -> all ``n_blocks`` (common/arg.cpp)."""
    found = 0
    for j, arg in enumerate(extra_args):
        flag, _, value = arg.partition("=")
        if flag in ("--cpu-moe", "-cmoe"):
            found = n_blocks
        elif flag in ("--n-cpu-moe", "-ncmoe"):
            value = value or (extra_args[j + 1] if j + 1 < len(extra_args) else "")
            found = int(value) if value.isdigit() else found
    return min(found, n_blocks)


def split_shares(assigned: tuple[int, ...], split: str | None, usable: list[GPU]) -> tuple[float, ...] | None:
    """The fraction of a model on each GPU of ``assigned``, as the launch splits it: the
    ``--tensor-split`` proportions, else (llama.cpp's default) by free memory; None = equal."""
    if len(assigned) < 2:
        return None
    by_index = {g.index: g for g in usable}
    if split:
        weights = [float(x) for x in split.split(",")]
    else:
        free = [by_index[x].memory_free if x in by_index else None for x in assigned]
        if any(f is None for f in free):
            return None
        weights = [float(f or 0) for f in free]
    total = sum(weights)
    return tuple(w / total for w in weights) if total > 0 else None
