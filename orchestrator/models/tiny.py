"""A tiny ``qwen35moe`` GGUF with a NextN/MTP head: the demo and test model.

``write_tiny_model(out)`` writes a 16 MB model that the pinned llama-server loads on CPU and
serves with ``--spec-type draft-mtp``: 4 trunk layers (3 gated-delta-net + 1 full attention,
``full_attention_interval = 4``), MoE with 4 experts (2 used) plus a shared expert, one NextN
block (``blk.4.nextn.*``, ``nextn_predict_layers = 1``), the Qwen tokenizer copied from the
pinned source (``models/ggml-vocab-qwen35.gguf``) and the Qwen3.5 chat template
(``models/templates/Qwen3.5-4B.jinja``). Tensor names and shapes follow
``src/models/qwen35moe.cpp`` (``load_arch_tensors``) and ``src/models/qwen35.cpp`` (dense).

Modes
-----
``echo`` (default): known output and tunable acceptance.

* The trunk's greedy next token is ``f(t)``: **the next "clean" token id after t** (clean: a
  normal token whose text is valid UTF-8 without control characters and that llama.cpp does
  not turn into a control/EOG token by name, like ``</s>``; wraps around). So a
  generation counts upward through the vocabulary from the prompt's last token, and never
  produces a control/EOG token. A non-clean input token (``<|im_end|>``, a lone byte) behaves
  like the clean token just below it.
* How: every embedding is a codeword of the extended BCH [32, 21, 6] code scaled to a unit
  vector, so two tokens' embeddings have cosine <= 0.625; the output row of ``f(t)`` is
  ``t``'s embedding (rows of non-clean tokens are zero); every write into the residual stream
  is scaled by 1e-3, so the final hidden state stays ~``embed(t)``; ``output_norm`` = 16
  makes the argmax margin >= 34 logits.
* The NextN block's ``eh_proj = [I | 0]`` keeps only the embedding half of
  ``concat(enorm(embed(x[p+1])), hnorm(h[p]))`` (src/models/qwen35moe.cpp, ``graph_mtp``), so
  the head predicts ``f(x[p+1]) = x[p+2]`` exactly.
* Acceptance ``1 - q``: a seeded fraction ``q`` of clean tokens is "flagged"; a flagged token's
  codeword has bit 0 set (embedding coordinate 0 > 0). In the NextN block the shared expert
  computes ``silu(16 * x0) * x0`` (about 16 when flagged, about 2e-6 otherwise) and writes it
  along a fixed "junk" direction, so the head's draft for the token after a flagged token is
  wrong and gets rejected. Each draft input is a token never seen before, so acceptance is
  Bernoulli(1 - q) per drafted token. (The same thing could zero head rows, but that needs a
  third vocabulary-sized matrix: 5 MB more.)

``random``: seeded random weights at ordinary scales (acceptance about 0); ``q`` is ignored.

Variants
--------
``embedded``: one file, head inside (the NextN tensors load only with ``--spec-type``).
``separate``: ``out`` holds the trunk (``block_count = 4``, no NextN) and
``out.with_suffix(".draft.gguf")`` a NextN-only draft (``token_embd``, ``output_norm``,
``output`` and ``blk.4.*``, ``block_count = 5``, ``nextn_predict_layers = 1``), the layout
``convert_hf_to_gguf.py --mtp`` writes (``mtp-<name>.gguf``). The pin loads it with
``-md DRAFT --spec-type draft-mtp`` (or ``-md`` alone: ``common_speculative_types_from_gguf``
infers draft-mtp from the last block's ``nextn.eh_proj``): ``load_arch_tensors`` treats a file
with NextN layers and no ``blk.0.attn_norm`` as MTP-only, and
``common_speculative_init_result`` builds the MTP context on the draft model.
``dense``: the ``qwen35`` architecture (dense FFN instead of MoE), head embedded.

Sizes: two Q8_0 matrices of 151,936 x 32 (5.2 MB each) + the tokenizer (5.9 MB) + 0.2 MB of
F32 tensors: about 16 MB per file. Same arguments -> same bytes.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import UserError

if TYPE_CHECKING:
    import numpy as np

# Bump whenever the bytes written for the same arguments change: cached demo models regenerate.
GENERATOR_VERSION = 2

MODES = ("echo", "random")
VARIANTS = ("embedded", "separate", "dense")
DEMO_Q = 0.1

VOCAB_FILE = "models/ggml-vocab-qwen35.gguf"
TEMPLATE_FILE = "models/templates/Qwen3.5-4B.jinja"
# llama.cpp's vocab loader marks tokens as control/EOG by their text (``t.first == "</s>"``
# etc.), whatever their type in the GGUF; the echo map must never produce one.
VOCAB_LOADER_FILE = "src/llama-vocab.cpp"
_SPECIAL_TEXT_RE = re.compile(r't\.first\s*==\s*"((?:[^"\\]|\\.)*)"')

# --- shapes (ggml order in comments: {ne0, ne1, ...}) ---------------------------------------
N_EMBD = 32  # a multiple of the Q8_0 block (32)
N_TRUNK = 4  # layers 0-2 gated delta net, layer 3 full attention
FULL_ATTENTION_INTERVAL = 4
N_HEAD, N_HEAD_KV, HEAD_DIM = 2, 1, 16
N_ROT = 8  # partial rotary, as Qwen3.5 (64 of 256)
ROPE_SECTIONS = [2, 1, 1, 0]  # must sum to N_ROT / 2 (ggml_rope_multi)
SSM_CONV, SSM_STATE, SSM_GROUPS, SSM_DT_RANK = 4, 16, 1, 2
SSM_INNER = SSM_STATE * SSM_DT_RANK  # the loader requires inner = state_size * time_step_rank
N_EXPERT, N_EXPERT_USED, N_FF_EXP, N_FF_SHEXP = 4, 2, 16, 16
N_FF_DENSE = 32
CONTEXT_LENGTH = 4096
RMS_EPS = 1e-6
ROPE_FREQ_BASE = 10_000_000.0

# --- echo construction constants ------------------------------------------------------------
WRITE_SCALE = 1e-3  # every write into the residual stream
OUTPUT_NORM = 16.0  # logit margin >= OUTPUT_NORM * sqrt(N_EMBD) * (1 - 0.625) = 34
FLAG_GAIN = 16.0  # silu(16) = 16, silu(-16) = -1.8e-6
JUNK_GAIN = 100.0  # the flagged write dwarfs the residual (norm sqrt(N_EMBD))


@dataclass(frozen=True)
class _Vocab:
    """The copied tokenizer and what the echo map needs from it."""

    kv: list[tuple[str, Any, int, int | None]]  # (key, value, GGUF type, item type)
    n_vocab: int
    clean: np.ndarray  # sorted clean token ids


# --- sources ---------------------------------------------------------------------------------


def _source_file(rel: str, source: Path | None = None) -> Path:
    if source is None:
        from orchestrator.native.build import pinned_source

        source = pinned_source()
    path = source / rel
    if not path.is_file():
        raise UserError(
            f"{path} is missing from the pinned llama.cpp source", hint="run `orchestrator build` to re-extract it"
        )
    return path


def _bytes_decoder() -> dict[str, int]:
    """GPT-2 byte-level BPE: the printable stand-in character of each byte -> the byte."""
    keep = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = keep[:]
    n = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars)}


def special_texts(source: Path | None = None) -> frozenset[str]:
    """Token texts that the pinned llama.cpp's vocab loader turns into control/EOG tokens by name
    (every ``t.first == "..."`` literal in src/llama-vocab.cpp, e.g. ``</s>``, ``<|im_end|>``)."""
    text = _source_file(VOCAB_LOADER_FILE, source).read_text(encoding="utf-8")
    found = frozenset(_SPECIAL_TEXT_RE.findall(text))
    if not found:
        raise UserError(f"no special-token names found in {VOCAB_LOADER_FILE} of the pinned source")
    return found


def _is_clean(text: str, decoder: dict[str, int]) -> bool:
    try:
        raw = bytes(decoder[ch] for ch in text)
        s = raw.decode("utf-8")
    except (KeyError, UnicodeDecodeError):
        return False
    return bool(s) and all(ch in "\n\t" or not unicodedata.category(ch).startswith("C") for ch in s)


def _load_vocab() -> _Vocab:
    from orchestrator.native.build import pinned_source

    return _load_vocab_from(pinned_source())


@functools.lru_cache(maxsize=2)
def _load_vocab_from(source: Path) -> _Vocab:
    # cached per process: parsing 300,000 tokenizer strings is most of a model's write time
    import numpy as np

    from orchestrator.models.gguf_header import read_header

    path = _source_file(VOCAB_FILE, source)
    header = read_header(path, keep_string_arrays=("tokenizer.ggml.tokens", "tokenizer.ggml.merges"))
    kv = [
        (key, value, *header.value_types[key])
        for key, value in header.metadata.items()
        if key.startswith("tokenizer.") and key != "tokenizer.chat_template"
    ]
    tokens: list[str] = header.metadata["tokenizer.ggml.tokens"]
    types = header.metadata["tokenizer.ggml.token_type"]
    decoder = _bytes_decoder()
    special = special_texts(source)
    clean = np.array(
        [
            i
            for i, (tok, ty) in enumerate(zip(tokens, types))
            if ty == 1 and tok not in special and _is_clean(tok, decoder)
        ],
        dtype=np.int64,
    )
    return _Vocab(kv=kv, n_vocab=len(tokens), clean=clean)


# --- the code behind the embeddings ------------------------------------------------------------


def _gf2_mul(a: int, b: int) -> int:
    r = 0
    while b:
        if b & 1:
            r ^= a
        a <<= 1
        b >>= 1
    return r


def _gf2_mod(a: int, m: int) -> int:
    dm = m.bit_length()
    while a.bit_length() >= dm:
        a ^= m << (a.bit_length() - dm)
    return a


def bch_generator() -> int:
    """Generator polynomial (bit i = coefficient of x^i) of the binary BCH [31, 21, 5] code:
    m1(x) * m3(x), the minimal polynomials of a and a^3 in GF(32) = GF(2)[x]/(x^5 + x^2 + 1)."""
    prim = 0b100101  # x^5 + x^2 + 1
    a3 = 0b1000  # a^3
    m3 = 0
    for cand in range(1 << 5, 1 << 6):  # monic degree-5 polynomials
        acc, power = 0, 1  # evaluate cand(a^3) in GF(32) by Horner-free summation
        for i in range(6):
            if cand >> i & 1:
                acc ^= power
            power = _gf2_mod(_gf2_mul(power, a3), prim)
        if acc == 0:
            m3 = cand
            break
    return _gf2_mul(prim, m3)


def codewords(n: int) -> np.ndarray:
    """The first ``n`` codewords (uint32, bit j = coordinate j) of the extended BCH [32, 21, 6]
    code: message m -> m(x) * g(x) (31 bits) plus an overall parity bit 31. Any two differ in
    at least 6 coordinates, so their +-1 vectors have cosine <= 1 - 2 * 6 / 32 = 0.625."""
    import numpy as np

    if n > 1 << 21:
        raise ValueError("the code has 2**21 codewords")
    g = bch_generator()
    m = np.arange(n, dtype=np.uint64)
    c = np.zeros(n, dtype=np.uint64)
    for i in range(g.bit_length()):
        if g >> i & 1:
            c ^= m << np.uint64(i)
    bits = np.unpackbits(c.astype("<u4").view(np.uint8).reshape(n, 4), axis=1, bitorder="little")
    parity = bits.sum(axis=1, dtype=np.uint64) & np.uint64(1)
    return (c | (parity << np.uint64(31))).astype(np.uint32)


def _to_unit(words: np.ndarray) -> np.ndarray:
    import numpy as np

    bits = np.unpackbits(words.astype("<u4").view(np.uint8).reshape(-1, 4), axis=1, bitorder="little")
    return ((bits.astype(np.float32) * 2.0 - 1.0) / np.float32(np.sqrt(N_EMBD))).astype(np.float32)


@dataclass(frozen=True)
class EchoMap:
    """The echo model's token map: ``successor[t]`` is the trunk's greedy next token after ``t``,
    ``flagged[t]`` whether the NextN draft for the token after ``t`` is made wrong on purpose."""

    clean: np.ndarray
    successor: np.ndarray  # [n_vocab] int64
    flagged: np.ndarray  # [n_vocab] bool
    junk: int  # the clean, unflagged token whose successor a wrong draft proposes


def echo_map(vocab_clean: np.ndarray, n_vocab: int, q: float, seed: int) -> EchoMap:
    """Build the echo map for ``q`` (fraction of clean tokens flagged) and ``seed``.

    Flags are nested: with the same seed, every token flagged at q is flagged at any q' > q.
    """
    import numpy as np

    clean = vocab_clean
    n = len(clean)
    # each token id -> index of the clean token at or below it (wrapping to the last one)
    below = np.searchsorted(clean, np.arange(n_vocab), side="right") - 1
    below[below < 0] = n - 1
    successor = clean[(below + 1) % n]
    order = np.random.default_rng([seed, 1]).permutation(n)
    flagged_clean = np.zeros(n, dtype=bool)
    flagged_clean[order[: int(round(q * n))]] = True
    flagged = flagged_clean[below]
    junk = int(clean[np.argmin(flagged_clean)])
    return EchoMap(clean=clean, successor=successor, flagged=flagged, junk=junk)


def load_echo_map(q: float, seed: int = 0) -> EchoMap:
    """The echo map of the model ``write_tiny_model(..., mode="echo", q=q, seed=seed)`` writes
    (reads the tokenizer from the pinned source). Raises ``UserError`` as ``write_tiny_model``."""
    vocab = _load_vocab()
    return echo_map(vocab.clean, vocab.n_vocab, q, seed)


# --- weights -----------------------------------------------------------------------------------


class _Weights:
    """Collects tensors in write order. Arrays are numpy-shaped (ggml shape reversed)."""

    def __init__(self, rng: np.random.Generator, write_scale: float) -> None:
        self.rng = rng
        self.write_scale = write_scale
        self.tensors: dict[str, tuple[np.ndarray, Any]] = {}

    def add(self, name: str, arr: np.ndarray, qtype: Any = None) -> None:
        self.tensors[name] = (arr, qtype)

    def proj(self, out_dim: int, in_dim: int, *, write: bool = False) -> np.ndarray:
        """Random projection y = W x, activations of RMS ~1 for normalised input; ``write``
        projections (into the residual stream) are scaled by ``write_scale``."""
        import numpy as np

        w = self.rng.standard_normal((out_dim, in_dim)).astype(np.float32) / np.float32(np.sqrt(in_dim))
        return w * np.float32(self.write_scale) if write else w

    def norm(self, n: int, echo: bool) -> np.ndarray:
        import numpy as np

        if echo:
            return np.ones(n, dtype=np.float32)
        return (1.0 + 0.1 * self.rng.standard_normal(n)).astype(np.float32)


def _attention(w: _Weights, p: str, echo: bool) -> None:
    w.add(f"{p}.attn_q.weight", w.proj(HEAD_DIM * N_HEAD * 2, N_EMBD))  # {n_embd, q + gate}
    w.add(f"{p}.attn_k.weight", w.proj(HEAD_DIM * N_HEAD_KV, N_EMBD))
    w.add(f"{p}.attn_v.weight", w.proj(HEAD_DIM * N_HEAD_KV, N_EMBD))
    w.add(f"{p}.attn_output.weight", w.proj(N_EMBD, HEAD_DIM * N_HEAD, write=True))
    w.add(f"{p}.attn_q_norm.weight", w.norm(HEAD_DIM, echo))
    w.add(f"{p}.attn_k_norm.weight", w.norm(HEAD_DIM, echo))


def _delta_net(w: _Weights, p: str, echo: bool) -> None:
    import numpy as np

    key_dim = SSM_STATE * SSM_GROUPS
    value_dim = SSM_STATE * SSM_DT_RANK
    w.add(f"{p}.attn_qkv.weight", w.proj(2 * key_dim + value_dim, N_EMBD))
    w.add(f"{p}.attn_gate.weight", w.proj(value_dim, N_EMBD))
    # ssm_conv1d must be F32: the CPU ssm_conv kernel asserts it
    conv = (0.5 * w.rng.standard_normal((2 * key_dim + value_dim, SSM_CONV))).astype(np.float32)
    w.add(f"{p}.ssm_conv1d.weight", conv)
    w.add(f"{p}.ssm_dt.bias", np.zeros(SSM_DT_RANK, dtype=np.float32))
    w.add(f"{p}.ssm_a", -np.exp(0.5 * w.rng.standard_normal(SSM_DT_RANK)).astype(np.float32))  # -exp(A_log)
    w.add(f"{p}.ssm_beta.weight", w.proj(SSM_DT_RANK, N_EMBD))
    w.add(f"{p}.ssm_alpha.weight", w.proj(SSM_DT_RANK, N_EMBD))
    w.add(f"{p}.ssm_norm.weight", w.norm(SSM_STATE, echo))
    w.add(f"{p}.ssm_out.weight", w.proj(N_EMBD, value_dim, write=True))


def _ffn(w: _Weights, p: str, dense: bool, flag_junk: np.ndarray | None) -> None:
    """MoE (routed + gated shared expert) or dense FFN. With ``flag_junk`` (echo NextN block) the
    shared expert (or the dense FFN) gets the flag detector: unit 0 computes
    ``silu(FLAG_GAIN * x0) * x0`` and writes it along ``flag_junk``; its other units are zero."""
    import numpy as np

    def detector(n_ff: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        assert flag_junk is not None
        gate = np.zeros((n_ff, N_EMBD), dtype=np.float32)
        up = np.zeros((n_ff, N_EMBD), dtype=np.float32)
        down = np.zeros((N_EMBD, n_ff), dtype=np.float32)
        gate[0, 0] = FLAG_GAIN
        up[0, 0] = 1.0
        down[:, 0] = JUNK_GAIN * flag_junk
        return gate, up, down

    if dense:
        if flag_junk is not None:
            gate, up, down = detector(N_FF_DENSE)
        else:
            gate, up, down = (
                w.proj(N_FF_DENSE, N_EMBD),
                w.proj(N_FF_DENSE, N_EMBD),
                w.proj(N_EMBD, N_FF_DENSE, write=True),
            )
        w.add(f"{p}.ffn_gate.weight", gate)
        w.add(f"{p}.ffn_up.weight", up)
        w.add(f"{p}.ffn_down.weight", down)
        return
    w.add(f"{p}.ffn_gate_inp.weight", w.proj(N_EXPERT, N_EMBD))  # router {n_embd, n_expert}
    experts = [w.proj(N_FF_EXP, N_EMBD) for _ in range(N_EXPERT)]
    w.add(f"{p}.ffn_gate_exps.weight", np.stack(experts))  # {n_embd, n_ff_exp, n_expert}
    w.add(f"{p}.ffn_up_exps.weight", np.stack([w.proj(N_FF_EXP, N_EMBD) for _ in range(N_EXPERT)]))
    w.add(f"{p}.ffn_down_exps.weight", np.stack([w.proj(N_EMBD, N_FF_EXP, write=True) for _ in range(N_EXPERT)]))
    if flag_junk is not None:
        shared_gate = np.zeros(N_EMBD, dtype=np.float32)  # sigmoid(0) = 0.5: the shared expert always on
        gate, up, down = detector(N_FF_SHEXP)
    else:
        shared_gate = w.proj(1, N_EMBD)[0]
        gate, up, down = w.proj(N_FF_SHEXP, N_EMBD), w.proj(N_FF_SHEXP, N_EMBD), w.proj(N_EMBD, N_FF_SHEXP, write=True)
    w.add(f"{p}.ffn_gate_inp_shexp.weight", shared_gate)  # {n_embd}
    w.add(f"{p}.ffn_gate_shexp.weight", gate)
    w.add(f"{p}.ffn_up_shexp.weight", up)
    w.add(f"{p}.ffn_down_shexp.weight", down)


def _build_weights(vocab: _Vocab, mode: str, q: float, seed: int, dense: bool) -> _Weights:
    import numpy as np
    from gguf import GGMLQuantizationType as Q

    echo = mode == "echo"
    rng = np.random.default_rng([seed, 0])
    w = _Weights(rng, WRITE_SCALE if echo else 1.0)
    n_vocab = vocab.n_vocab

    if echo:
        emap = echo_map(vocab.clean, n_vocab, q, seed)
        clean = emap.clean
        flagged_clean = emap.flagged[clean]
        # bit 0 of a codeword is bit 0 of its message (g(0) = 1): even messages -> unflagged
        words = codewords(2 * len(clean))
        pools = [words[(words & 1) == 0], words[(words & 1) == 1]]  # bit 0 = the flag coordinate
        clean_words = np.empty(len(clean), dtype=np.uint32)
        for flag in (0, 1):
            idx = np.nonzero(flagged_clean == bool(flag))[0]
            clean_words[idx] = pools[flag][: len(idx)]
        clean_embd = _to_unit(clean_words)
        below = np.searchsorted(clean, np.arange(n_vocab), side="right") - 1
        tok_embd = clean_embd[below]  # non-clean tokens act as the clean token below them
        output = np.zeros((n_vocab, N_EMBD), dtype=np.float32)
        output[np.roll(clean, -1)] = clean_embd  # row f(t) = embed(t)
        junk_dir = tok_embd[emap.junk] * np.float32(np.sqrt(N_EMBD))
        output_norm = np.full(N_EMBD, OUTPUT_NORM, dtype=np.float32)
    else:
        tok_embd = rng.standard_normal((n_vocab, N_EMBD)).astype(np.float32)
        tok_embd /= np.linalg.norm(tok_embd, axis=1, keepdims=True)
        output = rng.standard_normal((n_vocab, N_EMBD)).astype(np.float32) / np.float32(np.sqrt(N_EMBD))
        junk_dir = None
        output_norm = w.norm(N_EMBD, False)

    # only the vocabulary-sized matrices are quantised; everything else stays F32
    w.add("token_embd.weight", tok_embd, Q.Q8_0)
    w.add("output_norm.weight", output_norm)
    w.add("output.weight", output, Q.Q8_0)
    for il in range(N_TRUNK):
        p = f"blk.{il}"
        w.add(f"{p}.attn_norm.weight", w.norm(N_EMBD, echo))
        w.add(f"{p}.post_attention_norm.weight", w.norm(N_EMBD, echo))
        if (il + 1) % FULL_ATTENTION_INTERVAL == 0:
            _attention(w, p, echo)
        else:
            _delta_net(w, p, echo)
        _ffn(w, p, dense, None)
    p = f"blk.{N_TRUNK}"
    w.add(f"{p}.attn_norm.weight", w.norm(N_EMBD, echo))
    w.add(f"{p}.post_attention_norm.weight", w.norm(N_EMBD, echo))
    _attention(w, p, echo)
    _ffn(w, p, dense, junk_dir)
    if echo:
        eh = np.concatenate([np.eye(N_EMBD, dtype=np.float32), np.zeros((N_EMBD, N_EMBD), dtype=np.float32)], axis=1)
    else:
        eh = w.proj(N_EMBD, 2 * N_EMBD)
    w.add(f"{p}.nextn.eh_proj.weight", eh)  # {2 * n_embd, n_embd}: embedding half first
    w.add(f"{p}.nextn.enorm.weight", w.norm(N_EMBD, echo))
    w.add(f"{p}.nextn.hnorm.weight", w.norm(N_EMBD, echo))
    return w


# --- writing -------------------------------------------------------------------------------------


def _write_gguf(
    path: Path,
    arch: str,
    vocab: _Vocab,
    template: str,
    weights: _Weights,
    *,
    names: list[str],
    block_count: int,
    nextn: int,
    dense: bool,
    provenance: dict[str, Any],
) -> None:
    import gguf
    import numpy as np
    from gguf import GGUFValueType as V

    tmp = tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False)
    tmp.close()
    try:
        wr = gguf.GGUFWriter(tmp.name, arch)
        wr.add_name(f"orchestrator tiny {provenance['mode']} ({provenance['variant']})")
        wr.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
        wr.add_quantization_version(gguf.GGML_QUANT_VERSION)
        wr.add_context_length(CONTEXT_LENGTH)
        wr.add_embedding_length(N_EMBD)
        wr.add_block_count(block_count)
        if nextn:
            wr.add_nextn_predict_layers(nextn)
        wr.add_head_count(N_HEAD)
        wr.add_head_count_kv(N_HEAD_KV)
        wr.add_key_length(HEAD_DIM)
        wr.add_value_length(HEAD_DIM)
        wr.add_layer_norm_rms_eps(RMS_EPS)
        wr.add_rope_dimension_count(N_ROT)
        wr.add_rope_dimension_sections(ROPE_SECTIONS)
        wr.add_rope_freq_base(ROPE_FREQ_BASE)
        wr.add_full_attention_interval(FULL_ATTENTION_INTERVAL)
        wr.add_ssm_conv_kernel(SSM_CONV)
        wr.add_ssm_state_size(SSM_STATE)
        wr.add_ssm_group_count(SSM_GROUPS)
        wr.add_ssm_time_step_rank(SSM_DT_RANK)
        wr.add_ssm_inner_size(SSM_INNER)
        if dense:
            wr.add_feed_forward_length(N_FF_DENSE)
        else:
            wr.add_expert_count(N_EXPERT)
            wr.add_expert_used_count(N_EXPERT_USED)
            wr.add_expert_feed_forward_length(N_FF_EXP)
            wr.add_expert_shared_feed_forward_length(N_FF_SHEXP)
        for key, value, vtype, item_type in vocab.kv:
            wr.add_key_value(key, value, V(vtype), V(item_type) if item_type is not None else None)
        wr.add_chat_template(template)
        for key, value in provenance.items():
            if isinstance(value, float):
                wr.add_float32(f"orchestrator.tiny.{key}", value)
            elif isinstance(value, int):
                wr.add_uint32(f"orchestrator.tiny.{key}", value)
            else:
                wr.add_string(f"orchestrator.tiny.{key}", str(value))
        for name in names:
            arr, qtype = weights.tensors[name]
            if qtype is not None:
                wr.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
            else:
                wr.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))
        wr.write_header_to_file()
        wr.write_kv_data_to_file()
        wr.write_tensors_to_file()
        wr.close()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp.name, 0o666 & ~umask)  # NamedTemporaryFile creates 0600
        os.replace(tmp.name, path)
    finally:
        if os.path.exists(tmp.name):
            os.unlink(tmp.name)


def draft_path(out: Path) -> Path:
    """Where the ``separate`` variant writes its NextN-only draft: ``out`` with suffix ``.draft.gguf``."""
    return Path(out).with_suffix(".draft.gguf")


def write_tiny_model(
    out: Path, *, mode: str = "echo", q: float = 0.0, seed: int = 0, variant: str = "embedded"
) -> Path:
    """Write the tiny model (see the module docstring) to ``out`` and return ``out``.

    Args:
        out: output path (.gguf); parent directories are created. Written atomically.
        mode: ``echo`` (known output, acceptance 1 - q) or ``random``.
        q: echo mode: fraction of tokens whose NextN draft is wrong, 0 <= q < 1.
        seed: seeds the random weights and the choice of flagged tokens.
        variant: ``embedded``, ``separate`` (also writes ``draft_path(out)``) or ``dense``.

    Returns: ``out``. Same arguments give the same bytes (about 16 MB per file).

    Raises:
        UserError: bad mode/variant/q, or the pinned source's tokenizer/template is missing.
    """
    if mode not in MODES:
        raise UserError(f"unknown tiny-model mode {mode!r}", hint=f"use one of: {', '.join(MODES)}")
    if variant not in VARIANTS:
        raise UserError(f"unknown tiny-model variant {variant!r}", hint=f"use one of: {', '.join(VARIANTS)}")
    if not 0.0 <= q < 1.0:
        raise UserError(
            f"q must be in [0, 1), got {q}", hint="q is the fraction of drafts made wrong: acceptance = 1 - q"
        )
    if seed < 0:
        raise UserError(f"seed must be >= 0, got {seed}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    vocab = _load_vocab()
    template = _source_file(TEMPLATE_FILE).read_text(encoding="utf-8")
    dense = variant == "dense"
    arch = "qwen35" if dense else "qwen35moe"
    weights = _build_weights(vocab, mode, q, seed, dense)
    provenance: dict[str, Any] = {
        "generator_version": GENERATOR_VERSION,
        "mode": mode,
        "q": float(q),
        "seed": seed,
        "variant": variant,
    }
    head = f"blk.{N_TRUNK}."
    trunk_names = [n for n in weights.tensors if not n.startswith(head)]
    common = dict(arch=arch, vocab=vocab, template=template, weights=weights, dense=dense)
    if variant == "separate":
        _write_gguf(
            out, names=trunk_names, block_count=N_TRUNK, nextn=0, provenance={**provenance, "part": "trunk"}, **common
        )  # type: ignore[arg-type]
        draft_names = ["token_embd.weight", "output_norm.weight", "output.weight"] + [
            n for n in weights.tensors if n.startswith(head)
        ]
        _write_gguf(
            draft_path(out),
            names=draft_names,
            block_count=N_TRUNK + 1,
            nextn=1,
            provenance={**provenance, "part": "draft"},
            **common,
        )  # type: ignore[arg-type]
    else:
        _write_gguf(out, names=list(weights.tensors), block_count=N_TRUNK + 1, nextn=1, provenance=provenance, **common)  # type: ignore[arg-type]
    return out


def demo_model() -> Path:
    """The cached demo model (echo, q = 0.1, embedded head), generated on first use under
    ``paths.demo_model_dir()``; the file name carries the generator version, so a new
    generator writes a new file. Raises ``UserError`` as ``write_tiny_model``."""
    from orchestrator.paths import demo_model_dir

    path = demo_model_dir() / f"tiny-echo-q{DEMO_Q}-v{GENERATOR_VERSION}.gguf"
    if not path.is_file():
        write_tiny_model(path, mode="echo", q=DEMO_Q, seed=0, variant="embedded")
    return path
