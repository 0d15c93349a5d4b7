"""The ``kinds`` profile of the shaped echo model: a draft head right for some content, wrong for
other content, and right less and less along an answer for a third kind.

Published acceptance of real MTP heads depends on the content (0.93 on verbatim recall, about
0.55 on code and prose) and falls along long outputs; a draft-length policy needs a model that
does the same to be tested on a CPU. Each clean token of the copied tokenizer gets a kind from
its text (``token_kind``): ``latin`` (ASCII letters), ``cjk`` (CJK ideographs), ``cyrillic``, or
``other``. With this profile the echo counts through the tokens *of the same kind* (the
trunk's greedy successor of a Cyrillic token is the next Cyrillic token), so an answer stays in
the kind its prompt ends in, and the draft head is:

* ``latin``: always right (acceptance 1);
* ``cjk``: always wrong (acceptance 0: drafting only costs);
* ``cyrillic``: right at the start of each run of ``RAMP`` tokens of the kind and wrong more and
  more often along it (flag probability ``j / RAMP`` at offset ``j``): acceptance falls with the
  position in the answer, from 1 to 0 over ``RAMP`` tokens;
* ``other``: wrong for a seeded fraction ``q`` (as the plain profile).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from orchestrator.models.tiny import _bytes_decoder

KINDS = ("latin", "cjk", "cyrillic", "other")
RAMP = 48  # tokens over which the cyrillic kind's acceptance falls from 1 to 0


def token_kind(text: str) -> str:
    """The kind of a token's decoded ``text`` (surrounding spaces ignored)."""
    t = text.strip()
    if t and all(c.isascii() and c.isalpha() for c in t):
        return "latin"
    if t and all("\u4e00" <= c <= "\u9fff" for c in t):
        return "cjk"
    if t and all("\u0400" <= c <= "\u04ff" for c in t):
        return "cyrillic"
    return "other"


@dataclass(frozen=True)
class KindMap:
    """Per clean token (index into the sorted clean ids): its kind code (index into ``KINDS``),
    the clean index of its successor, and whether its draft is made wrong."""

    kind: np.ndarray  # [n_clean] int8
    successor: np.ndarray  # [n_clean] int64, clean index
    flagged: np.ndarray  # [n_clean] bool


def kind_codes(texts: list[str]) -> np.ndarray:
    """``KINDS`` index of each decoded token text."""
    return np.array([KINDS.index(token_kind(t)) for t in texts], dtype=np.int8)


def kind_map(kind: np.ndarray, q: float, seed: int) -> KindMap:
    """The successor and flags of the ``kinds`` profile for clean tokens of kind codes ``kind``."""
    n = len(kind)
    successor = np.empty(n, dtype=np.int64)
    flagged = np.zeros(n, dtype=bool)
    rng = np.random.default_rng([seed, 7])
    for code, name in enumerate(KINDS):
        idx = np.nonzero(kind == code)[0]
        if len(idx) == 0:
            continue
        successor[idx] = np.roll(idx, -1)
        if name == "cjk":
            flagged[idx] = True
        elif name == "cyrillic":
            offset = np.arange(len(idx)) % RAMP
            flagged[idx] = rng.random(len(idx)) < offset / RAMP
        elif name == "other":
            flagged[idx] = rng.random(len(idx)) < q
    return KindMap(kind=kind, successor=successor, flagged=flagged)


def clean_kinds(vocab_kv: list[tuple[str, object, int, int | None]], clean: np.ndarray) -> np.ndarray:
    """Kind codes of the ``clean`` token ids of the copied tokenizer (its GGUF key-values)."""
    tokens = next(value for key, value, *_ in vocab_kv if key == "tokenizer.ggml.tokens")
    assert isinstance(tokens, list)
    dec = _bytes_decoder()
    return kind_codes([bytes(dec[c] for c in tokens[int(i)]).decode("utf-8") for i in clean])
