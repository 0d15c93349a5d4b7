"""The non-zero content of a shaped echo model: which rows hold what (see ``shaped``).

Everything lives in the first ``ROUTE_END`` (256) coordinates of the hidden state, so every
non-zero row fits in one K-quant super-block and the rest of each row is zero blocks:

* coordinates 0-31: the echo codeword of the tiny model (``tiny_echo.codewords``): token ``t``'s
  embedding, the output row of ``f(t)``, and the flag (coordinate 0 > 0) that makes the NextN
  draft after ``t`` wrong;
* coordinates 32-255: a seeded Gaussian "routing" vector per token (norm about 1). The routers
  read only these, so each token picks its own experts in every layer, independently of its
  neighbours, as a trained router with balanced load does; the output rows ignore them, so the
  echo map is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from orchestrator.models import content_kinds as ck
from orchestrator.models.shapes import Shape
from orchestrator.models.tiny_echo import codewords, echo_map, to_unit

CODE_DIM = 32  # echo codeword coordinates
ROUTE_END = 256  # codeword + routing coordinates: one K-quant super-block
CHUNK = 4096  # rows per generated chunk; fixed, so the bytes do not depend on memory
OUTPUT_NORM = 4.0  # logit of the right token about 4 * sqrt(n_embd / 2); F16-safe on GPUs
FLAG_LOGIT = 16.0  # silu(16) = 16, silu(-16) = -1.8e-6
JUNK_GAIN = 4.0  # a flagged draft's junk write is 32x the codeword part of the residual


@dataclass(frozen=True)
class EchoContent:
    """The echo map laid out for a shaped model of ``shape`` (token ids up to ``n_tok`` are real
    tokens of the copied tokenizer; ids from ``n_tok`` to ``shape.n_vocab`` are padding)."""

    shape: Shape
    n_tok: int
    seed: int
    clean_embd: np.ndarray  # [n_clean, CODE_DIM] unit codewords
    below: np.ndarray  # [n_tok] token id -> index of the clean token at or below it
    out_src: np.ndarray  # [n_vocab] output row -> clean index whose codeword it holds, or -1
    junk_sign: np.ndarray  # [CODE_DIM] +-1: the junk token's codeword

    @property
    def route_dim(self) -> int:
        return min(self.shape.n_embd, ROUTE_END) - CODE_DIM

    @property
    def code_scale(self) -> float:
        """Magnitude of a codeword coordinate after RMS norm over ``n_embd`` (embedding norm ~sqrt 2)."""
        return float(np.sqrt(self.shape.n_embd / CODE_DIM / 2.0))


def build(
    shape: Shape, n_tok: int, clean: np.ndarray, q: float, seed: int, kinds: np.ndarray | None = None
) -> EchoContent:
    """Lay out the echo map of the tokenizer's ``clean`` token ids for ``q`` and ``seed``;
    with ``kinds`` (kind codes of the clean tokens) the ``content_kinds`` profile instead."""
    emap = echo_map(clean, n_tok, q, seed)
    flagged_clean = emap.flagged[clean]
    succ = (np.arange(len(clean)) + 1) % len(clean)  # clean index -> its successor's clean index
    junk = emap.junk
    if kinds is not None:
        km = ck.kind_map(kinds, q, seed)
        flagged_clean, succ = km.flagged, km.successor
        junk = int(clean[np.nonzero((kinds == ck.KINDS.index("latin")) & ~flagged_clean)[0][0]])
    words = codewords(2 * len(clean))
    pools = [words[(words & 1) == 0], words[(words & 1) == 1]]  # bit 0 is the flag coordinate
    clean_words = np.empty(len(clean), dtype=np.uint32)
    for flag in (0, 1):
        idx = np.nonzero(flagged_clean == bool(flag))[0]
        clean_words[idx] = pools[flag][: len(idx)]
    clean_embd = to_unit(clean_words)
    below = np.searchsorted(clean, np.arange(n_tok), side="right") - 1
    below[below < 0] = len(clean) - 1
    out_src = np.full(shape.n_vocab, -1, dtype=np.int64)
    out_src[clean[succ]] = np.arange(len(clean))  # row f(t) = codeword(t)
    junk_sign = np.sign(clean_embd[np.searchsorted(clean, junk)]).astype(np.float32)
    return EchoContent(shape, n_tok, seed, clean_embd, below, out_src, junk_sign)


def _routing(c: EchoContent, a: int, b: int) -> np.ndarray:
    """Routing vectors of token ids ``a..b`` (chunk-aligned generation, so deterministic)."""
    parts = []
    for start in range(a - a % CHUNK, b, CHUNK):
        rng = np.random.default_rng([c.seed, 3, start // CHUNK])
        block = rng.standard_normal((CHUNK, c.route_dim)).astype(np.float32) / np.float32(np.sqrt(c.route_dim))
        lo, hi = max(a, start) - start, min(b, start + CHUNK) - start
        parts.append(block[lo:hi])
    return np.concatenate(parts)


def embd_rows(c: EchoContent, a: int, b: int) -> np.ndarray:
    """token_embd rows ``a..b`` (first ``ROUTE_END`` columns): codeword + routing vector;
    padding tokens are zero."""
    out = np.zeros((b - a, CODE_DIM + c.route_dim), dtype=np.float32)
    real = min(b, c.n_tok)
    if real > a:
        out[: real - a, :CODE_DIM] = c.clean_embd[c.below[a:real]]
        out[: real - a, CODE_DIM:] = _routing(c, a, real)
    return out


def output_rows(c: EchoContent, a: int, b: int) -> np.ndarray:
    """output rows ``a..b`` (first ``CODE_DIM`` columns): row ``f(t)`` holds ``t``'s codeword."""
    src = c.out_src[a:b]
    out = np.zeros((b - a, CODE_DIM), dtype=np.float32)
    out[src >= 0] = c.clean_embd[src[src >= 0]]
    return out


def router_rows(c: EchoContent, layer: int, a: int, b: int) -> np.ndarray:
    """ffn_gate_inp rows (experts) ``a..b`` of ``layer``: Gaussian on the routing coordinates only."""
    rng = np.random.default_rng([c.seed, 4, layer])
    w = rng.standard_normal((c.shape.n_expert, CODE_DIM + c.route_dim)).astype(np.float32)
    w[:, :CODE_DIM] = 0.0
    return w[a:b]


def eh_proj_rows(c: EchoContent, a: int, b: int) -> np.ndarray:
    """nextn.eh_proj rows ``a..b`` (output coordinates): identity on the embedding half's first
    ``ROUTE_END`` coordinates, so the head sees the next token's codeword and routing vector."""
    width = CODE_DIM + c.route_dim
    out = np.zeros((b - a, width), dtype=np.float32)
    for r in range(a, min(b, width)):
        out[r - a, r] = 1.0
    return out


def detector_rows(c: EchoContent, which: str, a: int, b: int) -> np.ndarray:
    """The NextN shared expert's flag detector (first block of each row): unit 0 computes
    ``silu(FLAG_LOGIT * sign(x0)) * sign(x0)`` (16 when the input token is flagged, ~0 if not)
    and ``down`` writes it along the junk token's codeword, so the draft becomes ``f(junk)``."""
    width = min(ROUTE_END, c.shape.n_embd if which != "down" else c.shape.n_ff_shexp)
    out = np.zeros((b - a, width), dtype=np.float32)
    if which in ("gate", "up") and a == 0:
        out[0, 0] = FLAG_LOGIT / c.code_scale if which == "gate" else 1.0 / c.code_scale
    elif which == "down":
        for r in range(a, min(b, CODE_DIM)):
            out[r - a, 0] = JUNK_GAIN * c.code_scale * c.junk_sign[r]
    return out
