"""Statistics for draft-length sweeps: pure functions on numbers, no I/O.

Terms:

- **K** (draft length, ``n_max``): the most tokens the NextN/MTP head drafts per step; K = 0 is
  the baseline, a llama-server launched without speculation.
- **verification step**: one forward pass of the full model. Without speculation it yields one
  token; with speculation it checks the draft and yields ``1 + accepted`` tokens (the accepted
  draft tokens plus the model's own next token).
- **tokens per step** = generated tokens / verification steps, where
  ``steps = predicted_n - draft_n_accepted`` (from llama-server's ``timings``). Why: every step
  yields exactly one token the model sampled itself plus the draft tokens it accepted, so
  ``predicted_n = steps + accepted``. The first token (sampled from the prefill batch) counts
  as a step too. On the echo model with no noise (every draft accepted) this approaches
  K + 1; it stays a little below because the server shortens the last drafts so as not to
  overrun ``n_predict`` (``get_n_draft_max()`` in ``tools/server/server-context.cpp``).
  Checked on the q = 0 echo model: 128 tokens at n_max 1, 2, 4 give 1.97, 2.91, 4.74 tokens
  per step, exactly what :func:`perfect_draft_counts` predicts (``tests/serve/drafting/test_per_request_draft.py``).
- **acceptance rate** r = accepted / drafted draft tokens.
- **per-token acceptance** a: the probability that one draft token is accepted given that the
  ones before it were. At K = 1 it is exactly the acceptance rate. At K > 1, a chain of K drafts
  stops at the first rejection, so under the geometric model
  ``r(K) = a (1 - a^K) / (K (1 - a))``; :func:`per_token_acceptance` inverts that. The sweep
  takes a from the smallest K > 0 it measured and compares every K against it; measuring a at
  each K from that K's own rate would make the comparison circular (tokens per step is
  ``1 + K r`` when every step drafts K tokens).
- **geometric expectation** of tokens per step: ``(1 - a^(K+1)) / (1 - a)`` (= 1 + a + ... + a^K).
- **speedup** = median decode tok/s at K / median decode tok/s at K = 0, from the same run.
- **step cost** = tokens per step / speedup: the wall time of one speculative step (drafting K
  tokens plus verifying K + 1) in units of one baseline decode step. Speculation wins exactly
  when tokens per step exceeds the step cost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Two K values are tied when their median tok/s differ by less than this fraction of the best,
# or by less than half the best K's relative IQR if that is larger (the noise this run measured).
# Why 2%: a smaller gain is not worth acting on, and the floor keeps a lucky low-IQR run from
# splitting hairs. A smaller K is preferred on a tie because it wastes less work (drafted and
# rejected tokens) when acceptance drops on prompts unlike the benchmark's.
TIE_BAND = 0.02


def median(values: Sequence[float]) -> float:
    """Median of ``values`` (NaN for an empty sequence)."""
    if not values:
        return math.nan
    return float(np.median(np.asarray(values, dtype=float)))


def iqr(values: Sequence[float]) -> float:
    """Interquartile range (75th - 25th percentile, linear interpolation); NaN when empty.

    With one value it is 0. With three values (the default ``--reps 3``) it is half the range.
    """
    if not values:
        return math.nan
    q75, q25 = np.percentile(np.asarray(values, dtype=float), [75, 25])
    return float(q75 - q25)


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    """(25th, 75th) percentiles with linear interpolation; NaNs when empty."""
    if not values:
        return math.nan, math.nan
    q25, q75 = np.percentile(np.asarray(values, dtype=float), [25, 75])
    return float(q25), float(q75)


def verification_steps(predicted_n: int, accepted: int) -> int:
    """Verification steps of one request: ``predicted_n - accepted`` (see the module docstring).

    Raises:
        ValueError: if ``accepted`` is negative or exceeds ``predicted_n``.
    """
    if accepted < 0 or accepted > predicted_n:
        raise ValueError(f"accepted draft tokens ({accepted}) must be within 0..predicted tokens ({predicted_n})")
    return predicted_n - accepted


def tokens_per_step(predicted_n: int, accepted: int) -> float:
    """Generated tokens per verification step; 1.0 without speculation, NaN with no tokens."""
    steps = verification_steps(predicted_n, accepted)
    if steps == 0:
        return math.nan
    return predicted_n / steps


def perfect_draft_counts(n_predict: int, k: int) -> tuple[int, int]:
    """(verification steps, accepted draft tokens) of a generation of ``n_predict`` tokens at draft
    length ``k`` when every draft is accepted (the q = 0 echo model).

    Rule from llama-server (``get_n_draft_max()`` in ``tools/server/server-context.cpp``): the
    first token comes from the prefill step; afterwards each step drafts
    ``min(k, remaining - 1)`` tokens (so a draft never overruns ``n_predict``) and yields the
    draft plus one. Tokens per step is then ``n_predict / steps``: K + 1 in the limit, a bit
    less for short generations (64 tokens at K = 4: 14 steps, 4.57 tokens per step).
    """
    if n_predict <= 0:
        return 0, 0
    steps, accepted, remaining = 1, 0, n_predict - 1
    while remaining > 0:
        d = max(0, min(k, remaining - 1))
        steps += 1
        accepted += d
        remaining -= d + 1
    return steps, accepted


def acceptance_rate(drafted: int, accepted: int) -> float:
    """Accepted / drafted draft tokens (NaN when nothing was drafted)."""
    if drafted <= 0:
        return math.nan
    return accepted / drafted


def mean_accepted_length(predicted_n: int, accepted: int) -> float:
    """Accepted draft tokens per verification step (= tokens per step - 1; NaN with no tokens).

    This excludes the token the model samples itself each step (some tools count it; then
    their "acceptance length" equals our tokens per step).
    """
    steps = verification_steps(predicted_n, accepted)
    if steps == 0:
        return math.nan
    return accepted / steps


def geometric_tokens_per_step(a: float, k: int) -> float:
    """Expected tokens per step with per-token acceptance ``a`` and draft length ``k``.

    ``(1 - a^(k+1)) / (1 - a)``, i.e. ``1 + a + a^2 + ... + a^k``; ``k + 1`` at ``a = 1``.

    Raises:
        ValueError: if ``a`` is outside [0, 1] or ``k`` is negative.
    """
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"per-token acceptance must be within [0, 1], got {a}")
    if k < 0:
        raise ValueError(f"draft length must be >= 0, got {k}")
    if a == 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def geometric_acceptance_rate(a: float, k: int) -> float:
    """Acceptance rate a chain of ``k`` drafts gets under the geometric model: ``a(1-a^k)/(k(1-a))``."""
    if k <= 0:
        raise ValueError(f"draft length must be >= 1, got {k}")
    return (geometric_tokens_per_step(a, k) - 1.0) / k


def per_token_acceptance(rate: float, k: int) -> float:
    """Invert :func:`geometric_acceptance_rate`: the per-token acceptance ``a`` behind ``rate`` at ``k``.

    Exact at ``k = 1`` (``a = rate``); bisection otherwise (the map is increasing in ``a``).
    Returns NaN for a NaN rate.

    Raises:
        ValueError: if ``rate`` is outside [0, 1] or ``k < 1``.
    """
    if math.isnan(rate):
        return math.nan
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"acceptance rate must be within [0, 1], got {rate}")
    if k < 1:
        raise ValueError(f"draft length must be >= 1, got {k}")
    if k == 1 or rate in (0.0, 1.0):
        return rate
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if geometric_acceptance_rate(mid, k) < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def speedup(tps_k: float, tps_baseline: float) -> float:
    """``tps_k / tps_baseline`` (decode tok/s over decode tok/s); NaN if the baseline is not positive."""
    if not tps_baseline > 0:
        return math.nan
    return tps_k / tps_baseline


def step_cost(tokens_per_step_k: float, speedup_k: float) -> float:
    """Implied wall time of one speculative step in baseline decode steps: tokens per step / speedup.

    Why: a baseline step takes t0 and yields 1 token; a speculative step takes t and yields T
    tokens, so speedup = T t0 / t and t / t0 = T / speedup.
    """
    if not speedup_k > 0:
        return math.nan
    return tokens_per_step_k / speedup_k


@dataclass(frozen=True)
class Candidate:
    """One K's result for the recommendation: median decode tok/s and its IQR (tok/s)."""

    k: int
    median_tps: float
    iqr_tps: float


def tie_band(best: Candidate) -> float:
    """Relative noise band around the best K: max(TIE_BAND, IQR / (2 * median))."""
    if not best.median_tps > 0:
        return TIE_BAND
    noise = best.iqr_tps / (2 * best.median_tps) if not math.isnan(best.iqr_tps) else 0.0
    return max(TIE_BAND, noise)


def recommend_k(candidates: Sequence[Candidate]) -> tuple[int, float]:
    """Recommend a draft length: the best median tok/s, and on a tie the smaller K.

    A K is tied with the best when its median is within the noise band of the best
    (:func:`tie_band`: the larger of 2% and half the best K's relative IQR).

    Returns:
        ``(k, band)``: the recommended K and the relative band that was used.

    Raises:
        ValueError: if no candidate has a finite median.
    """
    finite = [c for c in candidates if not math.isnan(c.median_tps)]
    if not finite:
        raise ValueError("no K has a measured decode rate")
    best = max(finite, key=lambda c: (c.median_tps, -c.k))
    band = tie_band(best)
    tied = [c for c in finite if c.median_tps >= best.median_tps * (1.0 - band)]
    return min(c.k for c in tied), band
