"""Reporting for ``orchestrator bench``: CSV, JSON, PNG plot and analysis lines (the terminal
table is drawn by :mod:`orchestrator.cli.bench`).

Files written into the results folder:

- ``requests.csv``: one row per request (:class:`orchestrator.bench.summary.RequestResult`);
- ``summary.csv``: one row per (K, domain) (:class:`orchestrator.bench.summary.Summary`);
- ``results.json``: manifest (build commit and patches, GPUs, model hash), settings, summary,
  recommendation, analysis lines and every request;
- ``sweep.png``: decode tok/s (median, bars from the 25th to the 75th percentile) and acceptance
  rate against K, one line per domain.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.bench.summary import ALL, RequestResult, Summary


def fmt_number(x: float | None, fmt: str = ".2f") -> str:
    """``x`` formatted with ``fmt``; ``"-"`` for None or NaN (not measured)."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def analysis_line(s: Summary, *, losing_band: float) -> str:
    """One sentence explaining a K's result: measured vs geometric tokens per step, step cost, verdict.

    Args:
        s: the (K, domain) summary (K > 0).
        losing_band: relative noise band; a speedup within ``1 +- losing_band`` is "break-even".

    The verdict says why speculation loses when it does: if each drafted token adds about a
    full baseline step or more, drafting itself is too expensive (a CPU, or a tiny model where
    the NextN head with its vocabulary projection costs about as much as the whole model);
    otherwise, if acceptance is low, the draft head disagrees with the model too often.
    """
    head = (
        f"K={s.k} [{s.domain}]: {fmt_number(s.tokens_per_step)} tokens/step measured vs "
        f"{fmt_number(s.geometric)} geometric (a={fmt_number(s.per_token_acceptance)}); "
        f"acceptance {fmt_number(s.acceptance)}"
    )
    if math.isnan(s.speedup):
        return head + "; no K=0 baseline in this run, so no speedup or step cost"
    extra = (s.step_cost - 1.0) / s.k if not math.isnan(s.step_cost) else math.nan
    head += (
        f"; speedup {fmt_number(s.speedup)}x, so one verification step costs {fmt_number(s.step_cost)} "
        "baseline decode steps"
        f" ({fmt_number(extra)} per drafted token)"
    )
    if s.speedup >= 1.0 + losing_band:
        return head + f" -> wins: {fmt_number(s.tokens_per_step)} tokens per step outweigh that cost"
    if s.speedup > 1.0 - losing_band:
        return head + " -> break-even within noise"
    if not math.isnan(extra) and extra >= 0.5:
        # A drafted token costs one NextN draft pass plus one more row in the verification batch.
        # On a GPU both are cheap next to a decode step (memory-bound); ~1 each means compute-bound.
        # break-even needs tokens/step >= 1 + K * extra; the most a step can yield is K + 1
        bound = (
            f"so even perfect acceptance ({s.k + 1} tokens/step) cannot pay for it"
            if extra >= 1.0
            else f"so it would take {fmt_number(1.0 + s.k * extra)} tokens/step of the possible {s.k + 1} to break even"
        )
        why = (
            f"loses because drafting is too expensive: each drafted token costs about {fmt_number(extra, '.1f')} "
            f"baseline decode steps, {bound}. "
            "Typical of a CPU or a tiny model: the draft pass (NextN head + vocabulary projection) costs about "
            "as much as the whole model, and verifying K+1 tokens costs about K+1 decode steps"
        )
    elif not math.isnan(s.acceptance) and s.acceptance < 0.5:
        why = (
            f"loses because acceptance is low ({fmt_number(s.acceptance)}): the draft head disagrees with the model "
            "on this domain too often; try a smaller K"
        )
    else:
        why = (
            f"loses: {fmt_number(s.tokens_per_step)} tokens per step do not cover the step cost of "
            f"{fmt_number(s.step_cost)}"
        )
    return head + " -> " + why


def analysis_lines(summaries: Sequence[Summary], *, losing_band: float, domain: str) -> list[str]:
    """Analysis lines for every K > 0 of ``domain``."""
    return [analysis_line(s, losing_band=losing_band) for s in summaries if s.domain == domain and s.k > 0]


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    return x


def write_csv(path: Path, rows: Sequence[Any]) -> None:
    """Write dataclass ``rows`` as CSV with a header (computed properties included for requests)."""
    if not rows:
        path.write_text("", encoding="utf-8")
        return
    dicts = [_row(r) for r in rows]
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(dicts[0]))
        w.writeheader()
        for d in dicts:
            w.writerow({k: "" if v is None else v for k, v in d.items()})


def _row(r: Any) -> dict[str, Any]:
    d = dataclasses.asdict(r)
    if isinstance(r, RequestResult):
        d["tokens_per_step"] = r.tokens_per_step
    return d


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` as indented JSON; NaN becomes null so any JSON reader accepts it."""
    path.write_text(json.dumps(_jsonable(payload), indent=2) + "\n", encoding="utf-8")


def write_plot(path: Path, summaries: Sequence[Summary], *, title: str) -> None:
    """PNG with decode tok/s (median, quartile bars) and acceptance rate against K, per domain."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    domains = sorted({s.domain for s in summaries}, key=lambda d: (d == ALL, d))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    try:
        for d in domains:
            rows = sorted((s for s in summaries if s.domain == d), key=lambda s: s.k)
            style = {"linestyle": "--", "color": "black"} if d == ALL else {}
            ks = [s.k for s in rows]
            med = [s.tps_median for s in rows]
            # bars span the quartiles, which need not be symmetric around the median
            spread = [
                [m - s.tps_q25 for m, s in zip(med, rows, strict=True)],
                [s.tps_q75 - m for m, s in zip(med, rows, strict=True)],
            ]
            ax1.errorbar(ks, med, yerr=spread, marker="o", capsize=3, label=d, **style)
            spec = [s for s in rows if s.k > 0]
            ax2.plot([s.k for s in spec], [s.acceptance for s in spec], marker="o", label=d, **style)
        all_ks = sorted({s.k for s in summaries})
        ax1.set_xticks(all_ks)
        ax2.set_xticks([k for k in all_ks if k > 0])
        ax1.set_xlabel("draft length K (0 = no speculation)")
        ax1.set_ylabel("decode tok/s (median, bars = quartiles)")
        ax1.set_ylim(bottom=0)
        ax1.grid(alpha=0.3)
        ax1.legend()
        ax2.set_xlabel("draft length K")
        ax2.set_ylabel("acceptance rate (accepted / drafted)")
        ax2.set_ylim(0, 1.05)
        ax2.grid(alpha=0.3)
        ax2.legend()
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
