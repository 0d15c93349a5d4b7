"""The code behind the tiny echo model's embeddings, and its token map.

Every embedding is a codeword of the extended BCH [32, 21, 6] code scaled to a unit vector,
so two tokens' embeddings have cosine <= 0.625 (see ``orchestrator.models.tiny``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


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
    words: np.ndarray = (c | (parity << np.uint64(31))).astype(np.uint32)
    return words


def to_unit(words: np.ndarray) -> np.ndarray:
    """Codewords (uint32) -> unit vectors of +-1/sqrt(32) per coordinate (float32, [n, 32])."""
    import numpy as np

    bits = np.unpackbits(words.astype("<u4").view(np.uint8).reshape(-1, 4), axis=1, bitorder="little")
    return ((bits.astype(np.float32) * 2.0 - 1.0) / np.float32(np.sqrt(bits.shape[1]))).astype(np.float32)


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
    flagged_clean[order[: round(q * n)]] = True
    flagged = flagged_clean[below]
    junk = int(clean[np.argmin(flagged_clean)])
    return EchoMap(clean=clean, successor=successor, flagged=flagged, junk=junk)
