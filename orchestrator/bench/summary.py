"""Aggregation of one sweep's requests: per-request results, per-(K, domain) summaries, the
recommended K and the noise warning. Pure: numbers in, numbers out; the formulas and terms
are in :mod:`orchestrator.bench.stats`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.bench.stats import (
    Candidate,
    acceptance_rate,
    geometric_tokens_per_step,
    iqr,
    mean_accepted_length,
    median,
    per_token_acceptance,
    quartiles,
    recommend_k,
    speedup,
    step_cost,
    tokens_per_step,
)

ALL = "all"  # pseudo-domain: every prompt of the sweep together
NOISY_IQR = 0.25  # a relative IQR above this makes a single run's ranking unreliable

# (domain, prompt index, rep, seed): the same generation at two draft lengths
RunKey = tuple[str, int, int, int]


@dataclass(frozen=True)
class RequestResult:
    """What one benchmark request measured (from llama-server's ``timings`` and the stream).

    Fields: ``k`` draft length asked for (0 = baseline instance); ``domain``; ``prompt_index``
    (index in the prompt list); ``rep`` and ``seed`` (the repetition it belongs to);
    ``ttft_s`` seconds from sending to the first streamed content byte; ``prompt_ms``
    llama-server's prefill time (ms); ``predicted_n`` generated tokens; ``predicted_ms`` decode
    time (ms); ``decode_tps`` llama-server's ``predicted_per_second`` (tok/s); ``drafted`` and
    ``accepted`` draft tokens (``draft_n``, ``draft_n_accepted``; 0 when absent);
    ``n_max_effective`` the draft length the server reported applying (None when it does not
    report one); ``instance`` the llama-server instance name; ``text_sha1`` of the output text.
    """

    k: int
    domain: str
    prompt_index: int
    rep: int
    seed: int
    ttft_s: float
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    decode_tps: float
    drafted: int
    accepted: int
    n_max_effective: int | None
    instance: str
    text_sha1: str
    energy_j: float | None = None  # GPU energy during the request (NVML), None without a GPU

    @property
    def tokens_per_step(self) -> float:
        """Generated tokens per verification step (see :mod:`orchestrator.bench.stats`)."""
        return tokens_per_step(self.predicted_n, self.accepted)

    @property
    def run_key(self) -> RunKey:
        """The generation this request belongs to, whatever its K."""
        return (self.domain, self.prompt_index, self.rep, self.seed)


@dataclass(frozen=True)
class Summary:
    """Statistics of one (K, domain) cell of the sweep.

    Rates are in tok/s, times in seconds; ``reps`` is how many repetitions (rep x seed) the
    median/IQR are over; each repetition's decode rate is its total generated tokens over its
    total decode time. ``acceptance``, ``tokens_per_step`` and ``mean_accepted`` pool every
    request of the cell. ``per_token_acceptance`` is the domain's a (see :func:`summarize`);
    ``geometric`` the expected tokens per step from it; ``speedup`` and ``step_cost`` compare
    with K = 0 of the same domain in the same run (NaN without a baseline).
    """

    k: int
    domain: str
    requests: int
    reps: int
    tps_median: float
    tps_iqr: float
    tps_q25: float
    tps_q75: float
    ttft_median: float
    ttft_iqr: float
    drafted: int
    accepted: int
    predicted: int
    acceptance: float
    mean_accepted: float
    tokens_per_step: float
    per_token_acceptance: float
    geometric: float
    speedup: float
    step_cost: float
    same_text_as_baseline: bool | None
    joules_per_token: float | None = None  # GPU energy per generated token (None without NVML)


def _rep_rates(rows: Sequence[RequestResult]) -> tuple[list[float], list[float]]:
    """Per repetition (rep, seed): decode tok/s over all its requests, and its median TTFT (s)."""
    groups: dict[tuple[int, int], list[RequestResult]] = {}
    for r in rows:
        groups.setdefault((r.rep, r.seed), []).append(r)
    rates, ttfts = [], []
    for key in sorted(groups):
        g = groups[key]
        ms = sum(r.predicted_ms for r in g)
        if ms > 0:
            rates.append(1000.0 * sum(r.predicted_n for r in g) / ms)
        ttfts.append(median([r.ttft_s for r in g]))
    return rates, ttfts


def _domain_acceptance(cells: dict[int, list[RequestResult]]) -> float:
    """Per-token acceptance a, inverted from the acceptance rate at the smallest K > 0 (NaN without one)."""
    spec_ks = sorted(k for k in cells if k > 0)
    if not spec_ks:
        return math.nan
    cell = cells[spec_ks[0]]
    rate = acceptance_rate(sum(r.drafted for r in cell), sum(r.accepted for r in cell))
    return per_token_acceptance(rate, spec_ks[0])


def _same_text(cell: Sequence[RequestResult], baseline_text: dict[RunKey, str]) -> bool | None:
    """Whether every output of ``cell`` equals the K = 0 output of the same generation (None: not comparable)."""
    if not baseline_text or not cell or cell[0].k == 0:
        return None
    if not all(r.run_key in baseline_text for r in cell):
        return None
    return all(baseline_text[r.run_key] == r.text_sha1 for r in cell)


def _summary(domain: str, cell: list[RequestResult], *, a: float, base_tps: float, same: bool | None) -> Summary:
    """The :class:`Summary` of one (K, domain) cell; ``a`` and ``base_tps`` are the domain's."""
    k = cell[0].k
    rates, ttfts = _rep_rates(cell)
    predicted = sum(r.predicted_n for r in cell)
    accepted = sum(r.accepted for r in cell)
    drafted = sum(r.drafted for r in cell)
    tps_med = median(rates)
    sp = speedup(tps_med, base_tps)
    tpstep = tokens_per_step(predicted, accepted) if predicted else math.nan
    q25, q75 = quartiles(rates)
    return Summary(
        k=k,
        domain=domain,
        requests=len(cell),
        reps=len(rates),
        tps_median=tps_med,
        tps_iqr=iqr(rates),
        tps_q25=q25,
        tps_q75=q75,
        ttft_median=median(ttfts),
        ttft_iqr=iqr(ttfts),
        drafted=drafted,
        accepted=accepted,
        predicted=predicted,
        acceptance=acceptance_rate(drafted, accepted),
        mean_accepted=mean_accepted_length(predicted, accepted) if predicted else math.nan,
        tokens_per_step=tpstep,
        per_token_acceptance=a if k > 0 else math.nan,
        geometric=geometric_tokens_per_step(a, k) if not math.isnan(a) else (1.0 if k == 0 else math.nan),
        speedup=sp,
        step_cost=step_cost(tpstep, sp),
        same_text_as_baseline=same,
        joules_per_token=_joules_per_token(cell),
    )


def _joules_per_token(cell: Sequence[RequestResult]) -> float | None:
    """Energy over generated tokens of the cell; None unless every request was metered."""
    if not cell or any(r.energy_j is None for r in cell):
        return None
    tokens = sum(r.predicted_n for r in cell)
    return sum(r.energy_j or 0.0 for r in cell) / tokens if tokens else None


def disagreements(summaries: Sequence[Summary], *, min_steps: float = 1.5, min_gain: float = 1.05) -> list[str]:
    """Cells where acceptance and speed tell different stories: drafts accepted (at least
    ``min_steps`` tokens per step) yet no faster than K = 0, or faster by ``min_gain`` with
    almost nothing accepted (then the speed difference is noise or load, not drafting)."""
    out = []
    for s in summaries:
        if s.k == 0 or math.isnan(s.speedup):
            continue
        if s.tokens_per_step >= min_steps and s.speedup < 1.0:
            out.append(
                f"{s.domain} K={s.k}: {s.tokens_per_step:.2f} tokens per step but {s.speedup:.2f}x K=0: a "
                f"verification step costs {s.step_cost:.2f} plain steps, more than the accepted drafts save "
                "(draft head or batch verification too slow here)"
            )
        elif s.speedup >= min_gain and s.acceptance < 0.1:
            out.append(
                f"{s.domain} K={s.k}: {s.speedup:.2f}x K=0 with acceptance {s.acceptance:.2f}: drafting "
                "cannot explain that; the difference is noise or load (more --reps)"
            )
    return out


def summarize(results: Sequence[RequestResult]) -> list[Summary]:
    """Per (K, domain) statistics, plus the pseudo-domain ``"all"``; sorted by domain then K.

    The per-token acceptance a of a domain is inverted from the acceptance rate at the smallest
    K > 0 swept (exact when that is K = 1) and used for every K's geometric expectation, so the
    comparison shows whether acceptance falls off with draft position faster than a constant a
    would predict. ``same_text_as_baseline`` is whether every output equals the K = 0 output for
    the same prompt, rep and seed (expected at temperature 0; None without a baseline).
    """
    domains = sorted({r.domain for r in results})
    if len(domains) > 1:
        domains.append(ALL)
    baseline_text = {r.run_key: r.text_sha1 for r in results if r.k == 0}
    out: list[Summary] = []
    for domain in domains:
        rows = [r for r in results if domain == ALL or r.domain == domain]
        cells = {k: [r for r in rows if r.k == k] for k in sorted({r.k for r in rows})}
        a = _domain_acceptance(cells)
        base_tps = median(_rep_rates(cells[0])[0]) if 0 in cells else math.nan
        for cell in cells.values():
            same = _same_text(cell, baseline_text)
            out.append(_summary(domain, cell, a=a, base_tps=base_tps, same=same))
    return out


def recommend(summaries: Sequence[Summary], domain: str) -> tuple[int, float]:
    """Recommended K for ``domain`` (use ``"all"`` for the whole sweep); see :func:`recommend_k`."""
    cands = [Candidate(s.k, s.tps_median, s.tps_iqr) for s in summaries if s.domain == domain]
    return recommend_k(cands)


def overall_domain(summaries: Sequence[Summary]) -> str:
    """The domain whose recommendation is the sweep's: ``"all"`` if present, else the only domain."""
    domains = {s.domain for s in summaries}
    return ALL if ALL in domains else next(iter(domains))


def noise_warning(summaries: Sequence[Summary], domain: str) -> str | None:
    """A warning when decode rates of ``domain`` scatter by more than :data:`NOISY_IQR` (IQR / median)."""
    rel = [
        (s.tps_iqr / s.tps_median, s.k)
        for s in summaries
        if s.domain == domain and s.tps_median > 0 and not math.isnan(s.tps_iqr)
    ]
    if not rel:
        return None
    worst, k = max(rel)
    if worst <= NOISY_IQR:
        return None
    return (
        f"decode rates are noisy (IQR up to {worst:.0%} of the median, at K={k}): the machine was busy or the "
        "repetitions too few; rerun with more --reps on an otherwise idle machine before trusting small differences"
    )
