"""A sparse GGUF with the real ``qwen35moe`` header of Qwen3.6-35B-A3B (for plans and fit checks).

Every metadata key the pinned llama.cpp's ``src/models/qwen35moe.cpp`` reads, and every tensor with
the real shape (40 trunk layers, every 4th full attention, the rest gated delta-net; 256 experts
of width 512, 8 used; one NextN/MTP block ``blk.40``; vocabulary 248,320 rows). The tensor data is
one hole: the file is ~22.9 GB long and takes a few kB on disk. Only headers are ever read.

Dimensions: the model's public ``config.json`` (``text_config``). Types: ``MIX`` approximates
Unsloth's UD-Q4_K_XL dynamic mix (routed experts Q4_K with ``ffn_down_exps`` Q5_K, and Q5_K
gate/up experts in the first four and last three layers; attention, gated delta-net and shared
experts Q8_0; embeddings and output Q6_K; norms and routers F32),
chosen to give the published file size (22.9 GB); the per-tensor types of the published file
are not copied from it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

N_EMBD, N_LAYER, N_NEXTN, INTERVAL = 2048, 40, 1, 4
N_HEAD, N_HEAD_KV, HEAD_DIM, N_ROT = 16, 2, 256, 64
SSM_CONV, SSM_STATE, SSM_GROUPS, SSM_DT_RANK = 4, 128, 16, 32
N_EXPERT, N_EXPERT_USED, N_FF_EXP, N_FF_SHEXP = 256, 8, 512, 512
N_VOCAB, CONTEXT = 248_320, 262_144

MIX = {
    "token_embd": "Q6_K",
    "output": "Q6_K",
    "ffn_gate_exps": "Q4_K",
    "ffn_up_exps": "Q4_K",
    "ffn_down_exps": "Q5_K",
}
DEFAULT_TYPE = "Q8_0"  # attention, gated delta-net projections, shared experts, NextN eh_proj
MORE_BITS = {0, 1, 2, 3, 37, 38, 39}  # layers whose gate/up experts are Q5_K


def tensors() -> list[tuple[str, tuple[int, ...], str]]:
    """(name, ggml shape ne, type) of every tensor, in file order."""
    out: list[tuple[str, tuple[int, ...], str]] = []

    def mat(name: str, ne: tuple[int, ...]) -> None:
        kind = MIX.get(name.split(".")[-1], DEFAULT_TYPE)
        if name.endswith(("gate_exps", "up_exps")) and int(name.split(".")[1]) in MORE_BITS:
            kind = "Q5_K"
        out.append((f"{name}.weight", ne, kind))

    def vec(name: str, n: int, kind: str = "F32") -> None:
        out.append((name, (n,), kind))

    mat("token_embd", (N_EMBD, N_VOCAB))
    vec("output_norm.weight", N_EMBD)
    mat("output", (N_EMBD, N_VOCAB))
    q_dim, kv_dim = HEAD_DIM * N_HEAD, HEAD_DIM * N_HEAD_KV
    key_dim, value_dim = SSM_STATE * SSM_GROUPS, SSM_STATE * SSM_DT_RANK
    for il in range(N_LAYER + N_NEXTN):
        b = f"blk.{il}"
        vec(f"{b}.attn_norm.weight", N_EMBD)
        vec(f"{b}.post_attention_norm.weight", N_EMBD)
        head = il >= N_LAYER
        if head or (il + 1) % INTERVAL == 0:
            mat(f"{b}.attn_q", (N_EMBD, 2 * q_dim))
            mat(f"{b}.attn_k", (N_EMBD, kv_dim))
            mat(f"{b}.attn_v", (N_EMBD, kv_dim))
            mat(f"{b}.attn_output", (q_dim, N_EMBD))
            vec(f"{b}.attn_q_norm.weight", HEAD_DIM)
            vec(f"{b}.attn_k_norm.weight", HEAD_DIM)
        else:
            mat(f"{b}.attn_qkv", (N_EMBD, 2 * key_dim + value_dim))
            mat(f"{b}.attn_gate", (N_EMBD, value_dim))
            out.append((f"{b}.ssm_conv1d.weight", (SSM_CONV, 2 * key_dim + value_dim), "F32"))
            vec(f"{b}.ssm_dt.bias", SSM_DT_RANK)
            vec(f"{b}.ssm_a", SSM_DT_RANK)
            out.append((f"{b}.ssm_beta.weight", (N_EMBD, SSM_DT_RANK), "F32"))
            out.append((f"{b}.ssm_alpha.weight", (N_EMBD, SSM_DT_RANK), "F32"))
            vec(f"{b}.ssm_norm.weight", SSM_STATE)
            mat(f"{b}.ssm_out", (value_dim, N_EMBD))
        out.append((f"{b}.ffn_gate_inp.weight", (N_EMBD, N_EXPERT), "F32"))
        mat(f"{b}.ffn_gate_exps", (N_EMBD, N_FF_EXP, N_EXPERT))
        mat(f"{b}.ffn_up_exps", (N_EMBD, N_FF_EXP, N_EXPERT))
        mat(f"{b}.ffn_down_exps", (N_FF_EXP, N_EMBD, N_EXPERT))
        vec(f"{b}.ffn_gate_inp_shexp.weight", N_EMBD)
        mat(f"{b}.ffn_gate_shexp", (N_EMBD, N_FF_SHEXP))
        mat(f"{b}.ffn_up_shexp", (N_EMBD, N_FF_SHEXP))
        mat(f"{b}.ffn_down_shexp", (N_FF_SHEXP, N_EMBD))
        if head:
            mat(f"{b}.nextn.eh_proj", (2 * N_EMBD, N_EMBD))
            for norm in ("enorm", "hnorm", "shared_head_norm"):
                vec(f"{b}.nextn.{norm}.weight", N_EMBD)
    return out


def nbytes(ne: tuple[int, ...], kind: str) -> int:
    """Bytes of a tensor of ggml shape ``ne`` and type ``kind`` (gguf's block sizes)."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[kind]]
    return int(np.prod(ne)) // block * size


def write_qwen36_gguf(path: Path) -> Path:
    """Write the sparse Qwen3.6-35B-A3B GGUF to ``path`` (header only; the data is a hole)."""
    import gguf

    a = "qwen35moe"
    w = gguf.GGUFWriter(str(path), a)
    w.add_name("Qwen3.6-35B-A3B (header-only test file)")
    for key, value in {
        "context_length": CONTEXT,
        "embedding_length": N_EMBD,
        "block_count": N_LAYER + N_NEXTN,
        "nextn_predict_layers": N_NEXTN,
        "attention.head_count": N_HEAD,
        "attention.head_count_kv": N_HEAD_KV,
        "attention.key_length": HEAD_DIM,
        "attention.value_length": HEAD_DIM,
        "rope.dimension_count": N_ROT,
        "full_attention_interval": INTERVAL,
        "ssm.conv_kernel": SSM_CONV,
        "ssm.state_size": SSM_STATE,
        "ssm.group_count": SSM_GROUPS,
        "ssm.time_step_rank": SSM_DT_RANK,
        "ssm.inner_size": SSM_STATE * SSM_DT_RANK,
        "expert_count": N_EXPERT,
        "expert_used_count": N_EXPERT_USED,
        "expert_feed_forward_length": N_FF_EXP,
        "expert_shared_feed_forward_length": N_FF_SHEXP,
    }.items():
        w.add_uint32(f"{a}.{key}", value)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(f"{a}.rope.freq_base", 10_000_000.0)
    w.add_array(f"{a}.rope.dimension_sections", [11, 11, 10, 0])
    total = 0
    for name, ne, kind in tensors():
        size = nbytes(ne, kind)
        w.add_tensor_info(name, tuple(reversed(ne)), np.dtype(np.float32), size, gguf.GGMLQuantizationType[kind])
        total += (size + 31) // 32 * 32
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    with open(path, "r+b") as fh:  # the data section as a hole: the real length, nothing written
        header = fh.seek(0, 2)
        fh.truncate((header + 31) // 32 * 32 + total)
    return path
