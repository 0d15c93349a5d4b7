"""Memory a llama-server needs for a model: weights, KV cache, recurrent state (bytes).

The formula follows the pinned llama.cpp's ``llama_kv_cache`` (src/llama-kv-cache.cpp) and
``llama_memory_recurrent`` (src/llama-memory-recurrent.cpp); see ``estimate_memory``.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.errors import UserError
from orchestrator.models.facts import ModelFacts

#: The KV cache types llama-server accepts (``--cache-type-k/-v``).
KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


@dataclass
class MemoryEstimate:
    """Bytes a llama-server needs for one model (host or device memory), before compute buffers.

    ``total = weights + kv_cache + recurrent_state``; llama.cpp adds compute buffers on top
    (hundreds of MiB on large models), so leave headroom.
    """

    ctx: int  # tokens (llama-server ``-c``)
    n_parallel: int
    kv_type: str
    draft_n_max: int
    weights: int
    kv_cache: int
    recurrent_state: int
    total: int


def _kv_type_bytes(kv_type: str) -> float:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    name = kv_type.lower()
    if name not in KV_TYPES:
        raise UserError(f"unknown KV cache type {kv_type!r}", hint=f"use one of: {', '.join(KV_TYPES)}")
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[name.upper()]]
    return size / block


def estimate_memory(
    facts: ModelFacts,
    ctx: int,
    n_parallel: int = 1,
    kv_type: str = "f16",
    *,
    draft_n_max: int = 0,
    kv_type_v: str | None = None,
) -> MemoryEstimate:
    """Estimate the memory (bytes) llama-server needs for ``facts`` at context ``ctx`` tokens.

    Formula (the pinned llama.cpp's ``llama_kv_cache`` and ``llama_memory_recurrent``)::

        weights   = sum of tensor bytes, minus the NextN block unless draft_n_max > 0
                    (llama.cpp loads the NextN tensors only with --spec-type draft-mtp)
        kv_cache  = ctx * head_count_kv * (A * (key_length * bytes(kv_type) + value_length *
                    bytes(kv_type_v)) + N * (key_length + value_length) * 2)
                    A = trunk full-attention layers; N = nextn layers when draft_n_max > 0
                    (the MTP draft context keeps its own KV for the NextN block, ctx cells, in
                    the draft's cache types, f16 unless --cache-type-k-draft: common/speculative.cpp);
                    -c is the total over all slots, so n_parallel does not change it
        recurrent = R * (r + s) * 4 * max(1, n_parallel) * (1 + n_rs)
                    R = gated-delta-net layers, r = (conv_kernel - 1) * (inner_size +
                    2 * group_count * state_size), s = state_size * inner_size (F32 states);
                    n_rs = draft_n_max snapshots per sequence for draft rollback (cparams.n_rs_seq)
        total     = weights + kv_cache + recurrent

    Compute buffers are not included.

    Args:
        facts: from ``read_model_facts``.
        ctx: total context (tokens), as llama-server's ``-c``.
        n_parallel: slots (``-np``).
        kv_type: ``--cache-type-k`` (and ``-v`` unless ``kv_type_v``): f16 (default), f32, bf16, q8_0, ...
        draft_n_max: ``--spec-draft-n-max`` when serving with ``--spec-type draft-mtp``; 0 = no MTP.
        kv_type_v: ``--cache-type-v`` when it differs from ``kv_type``.

    Raises:
        UserError: unknown ``kv_type`` or a non-positive ``ctx``.
    """
    if ctx <= 0:
        raise UserError(f"context length must be positive, got {ctx}")
    per_k, per_v = _kv_type_bytes(kv_type), _kv_type_bytes(kv_type_v or kv_type)
    with_mtp = draft_n_max > 0 and facts.nextn_layers > 0
    weights = facts.weights_bytes - (0 if with_mtp else facts.nextn_bytes)
    nextn = facts.nextn_layers if with_mtp else 0
    k_len, v_len = facts.key_length or 0, facts.value_length or 0
    per_token = facts.attention_layers * (k_len * per_k + v_len * per_v) + nextn * (k_len + v_len) * 2
    kv = int(ctx * (facts.head_count_kv or 0) * per_token)
    s = facts.ssm
    conv = max(s.get("conv_kernel", 0) - 1, 0) * (
        s.get("inner_size", 0) + 2 * s.get("group_count", 0) * s.get("state_size", 0)
    )
    state = s.get("state_size", 0) * s.get("inner_size", 0)
    n_rs = draft_n_max if draft_n_max > 0 else 0
    recurrent = facts.recurrent_layers * (conv + state) * 4 * max(1, n_parallel) * (1 + n_rs)
    return MemoryEstimate(
        ctx=ctx,
        n_parallel=n_parallel,
        kv_type=kv_type,
        draft_n_max=draft_n_max,
        weights=weights,
        kv_cache=kv,
        recurrent_state=recurrent,
        total=weights + kv + recurrent,
    )
