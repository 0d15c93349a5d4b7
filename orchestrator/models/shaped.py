"""A ``qwen35moe`` GGUF with a real model's shapes and quantisation and the echo behaviour.

``write_shaped_model(out, shape="qwen3.6-35b-a3b", quant="q4_k_m", q=0.1, scale="full")`` writes
a model that llama-server loads and runs exactly like the real one as far as decode cost goes
(every tensor of the real file, same shapes, same ggml types, 8 of 256 experts routed per token,
spread like a trained router's), while its output is the tiny model's echo (``tiny``): greedy
output counts through the vocabulary, and the NextN/MTP draft is accepted with probability
``1 - q``. Speed of such a model on a GPU is the real model's speed at acceptance ``1 - q``.

How: the trunk's attention, gated delta-net and expert matrices are zero blocks (zero bytes,
written as holes: sparse on disk, no write time), so the residual stream carries the token
embedding unchanged; the embedding, output, router, NextN ``eh_proj`` and the NextN shared
expert carry the echo construction of ``shaped_echo``. Zero weights cost the GPU as much as
any others: llama.cpp reads every selected block whatever its values.

Quantisation mixes (``QUANTS``): ``q4_k_m`` follows llama.cpp's Q4_K_M rule
(``src/llama-quant.cpp``: Q4_K everywhere, Q6_K for ``output`` and for ``attn_v`` and
``ffn_down*`` in the layers where ``use_more_bits`` holds); ``q8_0`` and ``f16`` use one type for
every matrix. Norms, routers, ``ssm_a``/``ssm_dt``/``ssm_conv1d`` stay F32 in every mix, as in
published files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from orchestrator.errors import UserError
from orchestrator.models import content_kinds as ck
from orchestrator.models import gguf_write as gw
from orchestrator.models import shaped_echo as se
from orchestrator.models import tiny
from orchestrator.models.qblocks import TYPES, encode
from orchestrator.models.shapes import SCALES, Shape, get_shape, scaled

GENERATOR_VERSION = 1
QUANTS = {"q4_k_m": 15, "q8_0": 7, "f16": 1}  # -> general.file_type (llama_ftype)
TOKEN_UNUSED = 5  # llama_token_type LLAMA_TOKEN_TYPE_UNUSED: convert_hf_to_gguf.py's [PAD<i>] tokens
PROFILES = ("plain", "kinds")  # where drafts are wrong: a fraction q of tokens, or by content kind
RowsFn = Callable[[int, int], np.ndarray]


def _more_bits(il: int, n_layer: int) -> bool:
    """llama-quant.cpp ``use_more_bits``: the first and last eighth of layers and every third between."""
    return il < n_layer // 8 or il >= 7 * n_layer // 8 or (il - n_layer // 8) % 3 == 2


def matrix_type(quant: str, name: str, il: int | None, n_layer: int) -> str:
    """The ggml type of matrix ``name`` (``token_embd``, ``output``, or a block tensor's name
    without the ``blk.N.`` prefix) in layer ``il`` for mix ``quant``."""
    if quant == "f16":
        return "F16"
    if quant == "q8_0":
        return "Q8_0"
    if name == "output":
        return "Q6_K"
    if il is not None and name.split(".")[0] in ("attn_v", "ffn_down", "ffn_down_exps", "ffn_down_shexp"):
        return "Q6_K" if _more_bits(il, n_layer) else "Q4_K"
    return "Q4_K"


def _rows_fill(type_name: str, ne0: int, n_rows: int, rows: RowsFn) -> Callable[[BinaryIO], None]:
    """A ``fill`` that writes ``n_rows`` rows of ``ne0`` values, ``rows(a, b)`` giving the first
    columns of rows ``a..b`` (padded to a block with zeros; the rest of each row is zero)."""
    t = TYPES[type_name]

    def fill(fh: BinaryIO) -> None:
        row_bytes = t.row_bytes(ne0)
        for a in range(0, n_rows, se.CHUNK):
            b = min(n_rows, a + se.CHUNK)
            head = rows(a, b)
            width = min(ne0, -(-head.shape[1] // t.block) * t.block)
            padded = np.zeros((b - a, width), dtype=np.float32)
            padded[:, : head.shape[1]] = head
            enc = encode(padded, type_name)
            buf = np.zeros((b - a, row_bytes), dtype=np.uint8)
            buf[:, : enc.shape[1]] = enc
            fh.write(buf.tobytes())

    return fill


def _const(n: int, value: float) -> RowsFn:
    return lambda a, b: np.full((b - a, n), value, dtype=np.float32)


class _Specs:
    """Collects ``TensorSpec``s in file order for one shape, mix and echo content."""

    def __init__(self, shape: Shape, quant: str, echo: se.EchoContent) -> None:
        self.shape, self.quant, self.echo = shape, quant, echo
        self.specs: list[gw.TensorSpec] = []

    def vec(self, name: str, n: int, value: float | None = None) -> None:
        fill = None if not value else _rows_fill("F32", n, 1, _const(n, value))
        self.specs.append(gw.TensorSpec(name, (n,), "F32", fill))

    def mat(self, name: str, shape: tuple[int, ...], type_name: str, rows: RowsFn | None = None) -> None:
        n_rows = int(np.prod(shape[1:]))
        fill = _rows_fill(type_name, shape[0], n_rows, rows) if rows else None
        self.specs.append(gw.TensorSpec(name, shape, type_name, fill))

    def weight(self, il: int, name: str, shape: tuple[int, ...], rows: RowsFn | None = None) -> None:
        self.mat(f"blk.{il}.{name}.weight", shape, matrix_type(self.quant, name, il, self.shape.n_layer), rows)


def _attention(s: _Specs, il: int) -> None:
    sh = s.shape
    q_dim, kv_dim = sh.head_dim * sh.n_head, sh.head_dim * sh.n_head_kv
    s.weight(il, "attn_q", (sh.n_embd, 2 * q_dim))  # queries and their output gate
    s.weight(il, "attn_k", (sh.n_embd, kv_dim))
    s.weight(il, "attn_v", (sh.n_embd, kv_dim))
    s.weight(il, "attn_output", (q_dim, sh.n_embd))
    s.vec(f"blk.{il}.attn_q_norm.weight", sh.head_dim, 1.0)
    s.vec(f"blk.{il}.attn_k_norm.weight", sh.head_dim, 1.0)


def _delta_net(s: _Specs, il: int) -> None:
    sh = s.shape
    key_dim, value_dim = sh.ssm_state * sh.ssm_groups, sh.ssm_inner
    s.weight(il, "attn_qkv", (sh.n_embd, 2 * key_dim + value_dim))
    s.weight(il, "attn_gate", (sh.n_embd, value_dim))
    s.mat(f"blk.{il}.ssm_conv1d.weight", (sh.ssm_conv, 2 * key_dim + value_dim), "F32")  # the CPU kernel wants F32
    s.vec(f"blk.{il}.ssm_dt.bias", sh.ssm_dt_rank)
    s.vec(f"blk.{il}.ssm_a", sh.ssm_dt_rank, -1.0)  # -exp(A_log)
    s.weight(il, "ssm_beta", (sh.n_embd, sh.ssm_dt_rank))
    s.weight(il, "ssm_alpha", (sh.n_embd, sh.ssm_dt_rank))
    s.vec(f"blk.{il}.ssm_norm.weight", sh.ssm_state, 1.0)
    s.weight(il, "ssm_out", (value_dim, sh.n_embd))


def _moe(s: _Specs, il: int, head: bool) -> None:
    sh, echo = s.shape, s.echo
    s.mat(f"blk.{il}.ffn_gate_inp.weight", (sh.n_embd, sh.n_expert), "F32", lambda a, b: se.router_rows(echo, il, a, b))
    s.weight(il, "ffn_gate_exps", (sh.n_embd, sh.n_ff_exp, sh.n_expert))
    s.weight(il, "ffn_up_exps", (sh.n_embd, sh.n_ff_exp, sh.n_expert))
    s.weight(il, "ffn_down_exps", (sh.n_ff_exp, sh.n_embd, sh.n_expert))
    s.vec(f"blk.{il}.ffn_gate_inp_shexp.weight", sh.n_embd)  # zero: sigmoid(0) = 0.5, always on
    for which, shape in (("gate", (sh.n_embd, sh.n_ff_shexp)), ("up", (sh.n_embd, sh.n_ff_shexp))):
        rows = (lambda a, b, w=which: se.detector_rows(echo, w, a, b)) if head else None
        s.weight(il, f"ffn_{which}_shexp", shape, rows)
    s.weight(
        il,
        "ffn_down_shexp",
        (sh.n_ff_shexp, sh.n_embd),
        (lambda a, b: se.detector_rows(echo, "down", a, b)) if head else None,
    )


def tensor_specs(shape: Shape, quant: str, echo: se.EchoContent) -> list[gw.TensorSpec]:
    """Every tensor of the model in file order (names and shapes: src/models/qwen35moe.cpp)."""
    s = _Specs(shape, quant, echo)
    n, v = shape.n_embd, shape.n_vocab
    s.mat(
        "token_embd.weight",
        (n, v),
        matrix_type(quant, "token_embd", None, shape.n_layer),
        lambda a, b: se.embd_rows(echo, a, b),
    )
    s.vec("output_norm.weight", n, se.OUTPUT_NORM)
    s.mat(
        "output.weight",
        (n, v),
        matrix_type(quant, "output", None, shape.n_layer),
        lambda a, b: se.output_rows(echo, a, b),
    )
    for il in range(shape.n_layer + shape.n_nextn):
        s.vec(f"blk.{il}.attn_norm.weight", n, 1.0)
        s.vec(f"blk.{il}.post_attention_norm.weight", n, 1.0)
        head = il >= shape.n_layer
        if head or shape.is_attention(il):
            _attention(s, il)
        else:
            _delta_net(s, il)
        _moe(s, il, head)
        if head:
            s.weight(il, "nextn.eh_proj", (2 * n, n), lambda a, b: se.eh_proj_rows(echo, a, b))
            for norm in ("enorm", "hnorm", "shared_head_norm"):
                s.vec(f"blk.{il}.nextn.{norm}.weight", n, 1.0)
    return s.specs


def metadata(
    shape: Shape,
    quant: str,
    vocab_kv: list[tuple[str, Any, int, int | None]],
    template: str,
    provenance: dict[str, Any],
) -> list[gw.KV]:
    """The GGUF metadata: the architecture keys ``src/models/qwen35moe.cpp`` reads, the copied
    tokenizer (padded to ``shape.n_vocab`` with ``[PAD<i>]`` tokens of type UNUSED, as
    convert_hf_to_gguf.py pads), the chat template and provenance keys (prefix orchestrator.shaped)."""
    a = "qwen35moe"
    u32, f32 = gw.UINT32, gw.FLOAT32
    kvs = [
        gw.KV("general.architecture", gw.STRING, a),
        gw.KV("general.name", gw.STRING, f"orchestrator shaped {shape.name} {quant} echo"),
        gw.KV("general.file_type", u32, QUANTS[quant]),
        gw.KV("general.quantization_version", u32, 2),
        gw.KV(f"{a}.context_length", u32, shape.context_length),
        gw.KV(f"{a}.embedding_length", u32, shape.n_embd),
        gw.KV(f"{a}.block_count", u32, shape.n_layer + shape.n_nextn),
        gw.KV(f"{a}.nextn_predict_layers", u32, shape.n_nextn),
        gw.KV(f"{a}.attention.head_count", u32, shape.n_head),
        gw.KV(f"{a}.attention.head_count_kv", u32, shape.n_head_kv),
        gw.KV(f"{a}.attention.key_length", u32, shape.head_dim),
        gw.KV(f"{a}.attention.value_length", u32, shape.head_dim),
        gw.KV(f"{a}.attention.layer_norm_rms_epsilon", f32, shape.rms_eps),
        gw.KV(f"{a}.rope.dimension_count", u32, shape.n_rot),
        gw.KV(f"{a}.rope.dimension_sections", gw.ARRAY, list(shape.rope_sections), gw.INT32),
        gw.KV(f"{a}.rope.freq_base", f32, shape.rope_freq_base),
        gw.KV(f"{a}.full_attention_interval", u32, shape.full_attention_interval),
        gw.KV(f"{a}.ssm.conv_kernel", u32, shape.ssm_conv),
        gw.KV(f"{a}.ssm.state_size", u32, shape.ssm_state),
        gw.KV(f"{a}.ssm.group_count", u32, shape.ssm_groups),
        gw.KV(f"{a}.ssm.time_step_rank", u32, shape.ssm_dt_rank),
        gw.KV(f"{a}.ssm.inner_size", u32, shape.ssm_inner),
        gw.KV(f"{a}.expert_count", u32, shape.n_expert),
        gw.KV(f"{a}.expert_used_count", u32, shape.n_expert_used),
        gw.KV(f"{a}.expert_feed_forward_length", u32, shape.n_ff_exp),
        gw.KV(f"{a}.expert_shared_feed_forward_length", u32, shape.n_ff_shexp),
    ]
    for key, value, vtype, item_type in vocab_kv:
        if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
            pad = range(len(value), shape.n_vocab)
            value = list(value) + ([f"[PAD{i}]" for i in pad] if key.endswith("tokens") else [TOKEN_UNUSED] * len(pad))
        kvs.append(gw.KV(key, vtype, value, item_type))
    kvs.append(gw.KV("tokenizer.chat_template", gw.STRING, template))
    for key, value in provenance.items():
        vtype = gw.FLOAT32 if isinstance(value, float) else gw.UINT32 if isinstance(value, int) else gw.STRING
        kvs.append(gw.KV(f"orchestrator.shaped.{key}", vtype, value))
    return kvs


def resolve_shape(shape: str, scale: str) -> Shape:
    """The preset ``shape`` at ``scale`` (scaled models carry the pinned tokenizer's rows).
    Raises ``UserError`` for an unknown preset or scale, or a missing pinned source."""
    if scale not in SCALES:
        raise UserError(f"unknown scale {scale!r}", hint=f"use one of: {', '.join(SCALES)}")
    base = get_shape(shape)
    return base if scale == "full" else scaled(base, scale, tiny._load_vocab().n_vocab)


def write_shaped_model(
    out: Path,
    *,
    shape: str = "qwen3.6-35b-a3b",
    quant: str = "q4_k_m",
    q: float = 0.1,
    seed: int = 0,
    scale: str = "full",
    profile: str = "plain",
    progress: Callable[[str], None] | None = None,
) -> Shape:
    """Write the shaped echo model to ``out`` (atomically; zero tensors as sparse holes) and
    return the ``Shape`` it has. Acceptance of its NextN drafts is ``1 - q`` (``profile="plain"``),
    or depends on the content (``profile="kinds"``: see ``content_kinds``).

    Raises ``UserError`` for an unknown shape, scale or mix, ``q`` outside [0, 1), a tokenizer
    larger than the shape's vocabulary, or a missing pinned source; ``OSError`` when the disk fills.
    """
    if quant not in QUANTS:
        raise UserError(f"unknown quantisation {quant!r}", hint=f"use one of: {', '.join(QUANTS)}")
    if not 0.0 <= q < 1.0:
        raise UserError(
            f"q must be in [0, 1), got {q}", hint="q is the fraction of drafts made wrong: acceptance = 1 - q"
        )
    if seed < 0:
        raise UserError(f"seed must be >= 0, got {seed}")
    sh = resolve_shape(shape, scale)
    vocab = tiny._load_vocab()
    if vocab.n_vocab > sh.n_vocab:
        raise UserError(f"the pinned tokenizer has {vocab.n_vocab} tokens, more than {sh.name}'s {sh.n_vocab}")
    template = tiny._source_file(tiny.TEMPLATE_FILE).read_text(encoding="utf-8")
    if profile not in PROFILES:
        raise UserError(f"unknown profile {profile!r}", hint=f"use one of: {', '.join(PROFILES)}")
    kinds = ck.clean_kinds(vocab.kv, vocab.clean) if profile == "kinds" else None
    echo = se.build(sh, vocab.n_vocab, vocab.clean, q, seed, kinds)
    provenance: dict[str, Any] = {
        "generator_version": GENERATOR_VERSION,
        "shape": sh.name,
        "scale": scale,
        "quant": quant,
        "q": float(q),
        "seed": seed,
        "profile": profile,
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    gw.write_gguf(out, metadata(sh, quant, vocab.kv, template, provenance), tensor_specs(sh, quant, echo), progress)
    return sh


def disk_usage(path: Path) -> tuple[int, int]:
    """(apparent size, bytes allocated on disk) of ``path``: they differ when zero tensors are holes."""
    st = Path(path).stat()
    return st.st_size, getattr(st, "st_blocks", 0) * 512
