"""Shape presets for generated models: the real dimensions of a target model, and scaled copies.

``SHAPES["qwen3.6-35b-a3b"]`` holds Qwen3.6-35B-A3B's dimensions. Each number names the field of
the model's public Hugging Face ``config.json`` (``text_config``) it comes from and the GGUF key
(``qwen35moe.*``, as ``convert_hf_to_gguf.py`` writes it and ``src/models/qwen35moe.cpp`` of the
pinned llama.cpp reads it) that carries it. ``scaled(shape, scale)`` shrinks depth, expert count
and (for ``small``) width, so the same generator serves a CPU test suite:

* ``full``: the real shapes (about 21 GB at the Q4_K_M-like mix);
* ``medium``: the real width and vocabulary rows of the tokenizer, 24 trunk layers, 16 experts
  (about 1.7 GB at Q4_K_M): a trunk that dwarfs its draft head, for a CPU speed check;
* ``small``: width 256, 4 trunk layers, 16 experts (8 used; about 65 MB): the test suite's model;
* ``bed``: width 256, 16 trunk layers whose weight is in a wide shared expert (16,384; 8 small
  routed experts, 2 used): the draft-length policy's test bed. The draft head costs about a
  fifth of a decode step (the output matrix over the whole vocabulary is most of it), and the
  shared expert is a plain matrix product, which llama.cpp's CPU kernels batch (the routed
  experts' per-expert products do not), so verifying K + 1 tokens costs little more than one
  and drafting pays on a CPU; a step is cheap enough for an interleaved benchmark of many arms.

All parameter counts here are elements (weights), not bytes; ``shaped`` turns them into bytes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from orchestrator.errors import UserError


@dataclass(frozen=True)
class Shape:
    """The dimensions of a ``qwen35moe`` model with one NextN/MTP block (ggml naming)."""

    name: str
    n_embd: int  # hidden size (values)
    n_layer: int  # trunk layers; the NextN block is blk.{n_layer}
    n_nextn: int  # NextN/MTP blocks
    full_attention_interval: int  # every n-th trunk layer is full attention, the rest gated delta-net
    n_head: int  # attention query heads
    n_head_kv: int  # attention key/value heads
    head_dim: int  # attention key and value head size
    n_rot: int  # rotary dimensions per head
    rope_sections: tuple[int, int, int, int]  # multi-section rope; sums to n_rot / 2
    ssm_conv: int  # gated delta-net convolution kernel
    ssm_state: int  # gated delta-net key (and value) head size
    ssm_groups: int  # gated delta-net key heads
    ssm_dt_rank: int  # gated delta-net value heads
    n_expert: int  # routed experts per MoE layer
    n_expert_used: int  # routed experts active per token
    n_ff_exp: int  # routed expert width
    n_ff_shexp: int  # shared expert width
    n_vocab: int  # vocabulary rows of token_embd and output (the tokenizer is padded up to it)
    context_length: int  # tokens
    rms_eps: float
    rope_freq_base: float

    @property
    def ssm_inner(self) -> int:
        """Gated delta-net value width: the loader requires inner = state_size * time_step_rank."""
        return self.ssm_state * self.ssm_dt_rank

    def is_attention(self, il: int) -> bool:
        """Whether trunk layer ``il`` is full attention (the pin's rule, src/models/qwen35moe.cpp)."""
        return (il + 1) % self.full_attention_interval == 0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rope_sections"] = list(self.rope_sections)
        return d


QWEN36_35B_A3B = Shape(
    name="qwen3.6-35b-a3b",
    n_embd=2048,  # config.json hidden_size -> qwen35moe.embedding_length
    n_layer=40,  # num_hidden_layers -> qwen35moe.block_count = 41 with the MTP block
    n_nextn=1,  # mtp_num_hidden_layers -> qwen35moe.nextn_predict_layers; the head is blk.40
    full_attention_interval=4,  # full_attention_interval (layer_types: 3 linear, 1 full) -> same key
    n_head=16,  # num_attention_heads -> qwen35moe.attention.head_count
    n_head_kv=2,  # num_key_value_heads -> qwen35moe.attention.head_count_kv
    head_dim=256,  # head_dim -> qwen35moe.attention.key_length and .value_length
    n_rot=64,  # partial_rotary_factor 0.25 * head_dim -> qwen35moe.rope.dimension_count
    rope_sections=(11, 11, 10, 0),  # rope_parameters.mrope_section -> qwen35moe.rope.dimension_sections
    ssm_conv=4,  # linear_conv_kernel_dim -> qwen35moe.ssm.conv_kernel
    ssm_state=128,  # linear_key_head_dim (= linear_value_head_dim) -> qwen35moe.ssm.state_size
    ssm_groups=16,  # linear_num_key_heads -> qwen35moe.ssm.group_count
    ssm_dt_rank=32,  # linear_num_value_heads -> qwen35moe.ssm.time_step_rank (inner = 32 * 128)
    n_expert=256,  # num_experts -> qwen35moe.expert_count
    n_expert_used=8,  # num_experts_per_tok -> qwen35moe.expert_used_count
    n_ff_exp=512,  # moe_intermediate_size -> qwen35moe.expert_feed_forward_length
    n_ff_shexp=512,  # shared_expert_intermediate_size -> qwen35moe.expert_shared_feed_forward_length
    n_vocab=248_320,  # vocab_size (tie_word_embeddings false: token_embd and output both this tall)
    context_length=262_144,  # max_position_embeddings -> qwen35moe.context_length
    rms_eps=1e-6,  # rms_norm_eps -> qwen35moe.attention.layer_norm_rms_epsilon
    rope_freq_base=10_000_000.0,  # rope_parameters.rope_theta -> qwen35moe.rope.freq_base
)

SHAPES: dict[str, Shape] = {QWEN36_35B_A3B.name: QWEN36_35B_A3B}
SCALES = ("full", "medium", "small", "bed")


def scaled(shape: Shape, scale: str, tokenizer_vocab: int) -> Shape:
    """``shape`` at ``scale`` (see the module docstring). ``tokenizer_vocab`` is the size of the
    tokenizer the file will carry: scaled models keep exactly that many rows (no padding).
    Raises ``UserError`` for an unknown scale."""
    if scale == "full":
        return shape
    if scale == "medium":
        return replace(shape, n_layer=24, n_expert=16, n_vocab=tokenizer_vocab, context_length=32_768)
    if scale == "small":
        return replace(
            shape,
            n_embd=256,
            n_layer=4,
            n_head=2,
            n_head_kv=1,
            ssm_groups=2,
            ssm_dt_rank=4,
            n_expert=16,
            n_ff_exp=256,
            n_ff_shexp=256,
            n_vocab=tokenizer_vocab,
            context_length=8192,
        )
    if scale == "bed":
        small = scaled(shape, "small", tokenizer_vocab)
        return replace(small, n_layer=16, n_expert=8, n_expert_used=2, n_ff_exp=256, n_ff_shexp=16384)
    raise UserError(f"unknown scale {scale!r}", hint=f"use one of: {', '.join(SCALES)}")


def get_shape(name: str) -> Shape:
    """The preset called ``name``; raises ``UserError`` naming the known presets."""
    try:
        return SHAPES[name]
    except KeyError:
        raise UserError(f"unknown model shape {name!r}", hint=f"use one of: {', '.join(SHAPES)}") from None
