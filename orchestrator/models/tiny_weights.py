"""The tiny model's tensors: shapes of a ``qwen35moe``/``qwen35`` model in miniature, and the
echo construction's weights (see ``orchestrator.models.tiny`` for the why).

Tensor names and shapes follow the pin's ``src/models/qwen35moe.cpp`` and ``src/models/qwen35.cpp``
(``load_arch_tensors``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.models.tiny_echo import codewords, echo_map, to_unit

if TYPE_CHECKING:
    import numpy as np

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


class Weights:
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


def _attention(w: Weights, p: str, echo: bool) -> None:
    w.add(f"{p}.attn_q.weight", w.proj(HEAD_DIM * N_HEAD * 2, N_EMBD))  # {n_embd, q + gate}
    w.add(f"{p}.attn_k.weight", w.proj(HEAD_DIM * N_HEAD_KV, N_EMBD))
    w.add(f"{p}.attn_v.weight", w.proj(HEAD_DIM * N_HEAD_KV, N_EMBD))
    w.add(f"{p}.attn_output.weight", w.proj(N_EMBD, HEAD_DIM * N_HEAD, write=True))
    w.add(f"{p}.attn_q_norm.weight", w.norm(HEAD_DIM, echo))
    w.add(f"{p}.attn_k_norm.weight", w.norm(HEAD_DIM, echo))


def _delta_net(w: Weights, p: str, echo: bool) -> None:
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


def _ffn(w: Weights, p: str, dense: bool, flag_junk: np.ndarray | None) -> None:
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


_Vocabulary = tuple["np.ndarray", "np.ndarray", "np.ndarray | None", "np.ndarray"]


def build_weights(
    clean: np.ndarray,
    n_vocab: int,
    mode: str,
    q: float,
    seed: int,
    dense: bool,
    stop: tuple[int, int] | list[tuple[int, int]] | None = None,
) -> Weights:
    """Every tensor of the tiny model, in write order.

    Args:
        clean: sorted ids of the clean tokens (see ``orchestrator.models.tiny``).
        n_vocab: vocabulary size (tokens).
        mode: ``echo`` or ``random``; q, seed: as ``write_tiny_model``.
        dense: the ``qwen35`` dense FFN instead of MoE.
        stop: echo mode: ``(t, eog)``: after token ``t`` the echo emits the end-of-generation token
            ``eog`` instead of ``f(t)`` (which it then never emits), so answers reaching ``t`` end;
            or a list of such pairs, each with an end-of-generation token of its own.
    """
    import numpy as np
    from gguf import GGMLQuantizationType as Q

    echo = mode == "echo"
    w = Weights(np.random.default_rng([seed, 0]), WRITE_SCALE if echo else 1.0)
    if echo:
        tok_embd, output, junk_dir, output_norm = _echo_vocabulary(clean, n_vocab, q, seed)
        for t, eog in [stop] if isinstance(stop, tuple) else stop or []:
            successor = clean[(np.searchsorted(clean, t) + 1) % len(clean)]
            output[eog], output[successor] = output[successor].copy(), 0.0
    else:
        tok_embd, output, junk_dir, output_norm = _random_vocabulary(w, n_vocab)
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
    _nextn_block(w, f"blk.{N_TRUNK}", echo, dense, junk_dir)
    return w


def _echo_vocabulary(clean_ids: np.ndarray, n_vocab: int, q: float, seed: int) -> _Vocabulary:
    """(token_embd, output, junk direction, output_norm) of the echo construction."""
    import numpy as np

    emap = echo_map(clean_ids, n_vocab, q, seed)
    clean = emap.clean
    flagged_clean = emap.flagged[clean]
    # bit 0 of a codeword is bit 0 of its message (g(0) = 1): even messages -> unflagged
    words = codewords(2 * len(clean))
    pools = [words[(words & 1) == 0], words[(words & 1) == 1]]  # bit 0 = the flag coordinate
    clean_words = np.empty(len(clean), dtype=np.uint32)
    for flag in (0, 1):
        idx = np.nonzero(flagged_clean == bool(flag))[0]
        clean_words[idx] = pools[flag][: len(idx)]
    clean_embd = to_unit(clean_words)
    below = np.searchsorted(clean, np.arange(n_vocab), side="right") - 1
    tok_embd = clean_embd[below]  # non-clean tokens act as the clean token below them
    output = np.zeros((n_vocab, N_EMBD), dtype=np.float32)
    output[np.roll(clean, -1)] = clean_embd  # row f(t) = embed(t)
    junk_dir = tok_embd[emap.junk] * np.float32(np.sqrt(N_EMBD))
    return tok_embd, output, junk_dir, np.full(N_EMBD, OUTPUT_NORM, dtype=np.float32)


def _random_vocabulary(w: Weights, n_vocab: int) -> _Vocabulary:
    """(token_embd, output, None, output_norm) at ordinary random scales."""
    import numpy as np

    tok_embd = w.rng.standard_normal((n_vocab, N_EMBD)).astype(np.float32)
    tok_embd /= np.linalg.norm(tok_embd, axis=1, keepdims=True)
    output = w.rng.standard_normal((n_vocab, N_EMBD)).astype(np.float32) / np.float32(np.sqrt(N_EMBD))
    return tok_embd, output, None, w.norm(N_EMBD, False)


def _nextn_block(w: Weights, p: str, echo: bool, dense: bool, junk_dir: np.ndarray | None) -> None:
    """The NextN/MTP block: attention, the FFN (with the flag detector in echo mode), and
    ``eh_proj = [I | 0]`` in echo mode so the head keeps only the embedding half."""
    import numpy as np

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
